//! Distributed SpGEMM and sparse MTTKRP, planned from the pattern (the SpMM and SDDMM plans
//! are in [`crate::halo`]):
//!
//! - SpGEMM `ij,jk->ik` (A and B sparse, C sparse): A's rows (and C's) are cut into contiguous
//!   parts balanced by multiply-adds (the nonzeros of B each row of A reaches: what Gustavson's
//!   kernel does), B's rows like A's when A is square, else balanced by B's nonzeros; each rank
//!   receives exactly the rows of B its columns touch (lengths, columns and values);
//! - MTTKRP (`ijk,ja,ka->ia` and every other mode and order) over a grid of ranks: the output
//!   mode is cut into slabs at nnz-balanced points, and each slab along other modes in turn
//!   into boxes at points balanced by each box's own nonzeros; each rank receives exactly the
//!   factor rows its box's nonzeros touch, computes partial output rows, and sends the rows it
//!   does not own to their owners in its slab (exact words too). Each other mode's factor is cut
//!   at that mode's own nnz-balanced points (where its MTTKRP would produce it, as in CP-ALS).
//!   Among every factorization of P (the 1D cut along the output mode, one box per slab and
//!   nothing reduced, is one of them) whose nonzero imbalance is within
//!   [`IMBALANCE_SLACK`] of the least, the grid whose busiest rank moves the fewest words
//!   (received and sent) is chosen, fewer words in all breaking ties (within
//!   [`MAX_WORDS_TIE`]).
//!
//! Every plan states its imbalance and predicts each rank's words exactly, beside what
//! replicating the fetched operand would move.

use crate::fetch::{self, RowFetch};
use crate::kernels::{self, ModeGroups};
use crate::{Csr, SparseError, SparseTensor};
use deinsum_exec::{Communicator, Scalar};

/// Bytes of a wire word: predicted and measured volumes are counted in 8-byte words.
const WORD: u64 = 8;

fn no_ranks(procs: usize) -> Result<(), SparseError> {
    if procs == 0 {
        return Err(SparseError::Shape(
            "the number of ranks must be at least 1".into(),
        ));
    }
    Ok(())
}

/// The plan of one distributed SpGEMM `C = A B`. Size O(P + rows of B).
#[derive(Clone, Debug, PartialEq)]
pub struct SpgemmPlan {
    /// Number of ranks.
    pub procs: usize,
    /// Rank r holds rows `a_cuts[r]..a_cuts[r + 1]` of A and C.
    pub a_cuts: Vec<usize>,
    /// Nonzeros of A per rank.
    pub nnz: Vec<usize>,
    /// Multiply-adds per rank (per nonzero a_ij, the nonzeros of row j of B).
    pub madds: Vec<usize>,
    /// Nonzeros of each row of B (from its pattern).
    pub b_row_len: Vec<usize>,
    /// B's rows: who owns which and who receives which.
    pub fetch: RowFetch,
}

impl SpgemmPlan {
    /// Plans `A B` on `procs` ranks from both patterns.
    pub fn build<T: Scalar>(
        a: &Csr<T>,
        b: &Csr<T>,
        procs: usize,
    ) -> Result<SpgemmPlan, SparseError> {
        no_ranks(procs)?;
        if a.ncols != b.nrows {
            return Err(SparseError::Shape(format!(
                "A is {} x {}, B is {} x {}",
                a.nrows, a.ncols, b.nrows, b.ncols
            )));
        }
        let b_row_len: Vec<usize> = b.indptr.windows(2).map(|w| w[1] - w[0]).collect();
        // Prefix sums of each row of A's multiply-adds: the weights its rows are cut by.
        let mut work = Vec::with_capacity(a.nrows + 1);
        work.push(0usize);
        for i in 0..a.nrows {
            let w: usize = a.indices[a.indptr[i]..a.indptr[i + 1]]
                .iter()
                .map(|&j| b_row_len[j])
                .sum();
            work.push(work[i] + w);
        }
        let a_cuts = fetch::balance_rows(&work, procs);
        let b_cuts = if a.nrows == a.ncols {
            a_cuts.clone()
        } else {
            fetch::balance_rows(&b.indptr, procs)
        };
        let fetch = RowFetch::build(b.nrows, 0, b_cuts, |r| {
            a.indices[a.indptr[a_cuts[r]]..a.indptr[a_cuts[r + 1]]]
                .iter()
                .copied()
        })?;
        let nnz = (0..procs)
            .map(|r| a.indptr[a_cuts[r + 1]] - a.indptr[a_cuts[r]])
            .collect();
        let madds = (0..procs)
            .map(|r| work[a_cuts[r + 1]] - work[a_cuts[r]])
            .collect();
        Ok(SpgemmPlan {
            procs,
            a_cuts,
            nnz,
            madds,
            b_row_len,
            fetch,
        })
    }

    /// Bytes rank `r` receives for values of `value_bytes` bytes: per fetched row of B its
    /// length, columns (8 bytes each) and values.
    pub fn received_bytes(&self, r: usize, value_bytes: usize) -> u64 {
        self.fetch
            .csr_received_bytes(r, &self.b_row_len, value_bytes)
    }

    /// Bytes rank `r` sends (see [`SpgemmPlan::received_bytes`]).
    pub fn sent_bytes(&self, r: usize, value_bytes: usize) -> u64 {
        self.fetch.csr_sent_bytes(r, &self.b_row_len, value_bytes)
    }

    /// 8-byte words rank `r` receives with f64 values (a length, a column, a value: a word each).
    pub fn received_words(&self, r: usize) -> u64 {
        self.received_bytes(r, 8) / WORD
    }

    /// 8-byte words rank `r` sends with f64 values.
    pub fn sent_words(&self, r: usize) -> u64 {
        self.sent_bytes(r, 8) / WORD
    }

    /// 8-byte words rank `r` would receive if B were replicated (f64 values).
    pub fn replication_words(&self, r: usize) -> u64 {
        self.fetch.csr_replication_bytes(r, &self.b_row_len, 8) / WORD
    }

    /// Max nonzeros of A per rank over the mean.
    pub fn imbalance(&self) -> f64 {
        fetch::imbalance(&self.nnz)
    }

    /// Max multiply-adds per rank over the mean (what the cut balances).
    pub fn work_imbalance(&self) -> f64 {
        fetch::imbalance(&self.madds)
    }
}

/// Rank `comm.rank()`'s rows of `C = A B` under `plan`: `a_local` its rows of A
/// (`plan.a_cuts`), `b_local` its rows of B (`plan.fetch.cuts`), columns global. B's halo
/// rows arrive in one all-to-all; C's rows come back in CSR with global columns.
pub fn spgemm<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &SpgemmPlan,
    a_local: &Csr<T>,
    b_local: &Csr<T>,
) -> Result<Csr<T>, SparseError> {
    let me = comm.rank();
    if me < plan.procs && a_local.nrows != plan.a_cuts[me + 1] - plan.a_cuts[me] {
        return Err(SparseError::Shape(format!(
            "rank {me} holds {} rows of A; the plan gives it {}",
            a_local.nrows,
            plan.a_cuts[me + 1] - plan.a_cuts[me]
        )));
    }
    let bx = plan.fetch.exchange_csr(comm, b_local)?;
    let local = plan.fetch.localize(me, a_local)?;
    kernels::spgemm(&local, &bx)
}

/// The plan of one distributed sparse MTTKRP in mode `mode` over a grid of ranks. Size
/// O(P × order + halo rows).
///
/// The grid cuts the output mode into `grid[mode]` slabs at nnz-balanced points, then cuts
/// each slab along the modes of `splits` in turn: level l cuts every box of the level before
/// (a slab at level 0) along mode `splits[l].0` into `splits[l].1` boxes at points balanced
/// by that box's own nonzeros. Rank `q` computes the box whose slab and level parts, read as
/// mixed-radix digits (slab first), make `q`. The ranks of a slab share its output rows:
/// each owns a contiguous run of them (the output mode's P-way nnz-balanced cut, of which the
/// slabs are every (P / slabs)-th point) and receives the partial rows the others' nonzeros
/// give to it. With no split this is the 1D cut along the output mode: nothing is reduced.
#[derive(Clone, Debug, PartialEq)]
pub struct MttkrpPlan {
    /// Number of ranks.
    pub procs: usize,
    /// The output mode.
    pub mode: usize,
    /// Columns of the factors (the CP rank).
    pub r: usize,
    /// The tensor's shape.
    pub shape: Vec<usize>,
    /// Parts per mode: `grid[mode]` slabs, a split mode's boxes per box of the level before,
    /// 1 elsewhere; their product is `procs`.
    pub grid: Vec<usize>,
    /// The cuts within each slab, in order: (mode, boxes per box of the level before). Empty:
    /// the 1D cut.
    pub splits: Vec<(usize, usize)>,
    /// The output mode's slab cut points (`grid[mode] + 1`, nnz-balanced).
    pub slabs: Vec<usize>,
    /// Per level of `splits`, per box of the level before (slabs at level 0, numbered as the
    /// ranks are), that box's cut points along the level's mode, balanced by its nonzeros.
    pub levels: Vec<Vec<Vec<usize>>>,
    /// Per mode, the rows each rank owns: the output rows (M's) for the output mode, the
    /// factor's rows (cut at that mode's own nnz-balanced points) for the others.
    pub cuts: Vec<Vec<usize>>,
    /// Nonzeros per rank.
    pub nnz: Vec<usize>,
    /// Per mode, the factor's fetch (the output mode's fetches nothing).
    pub fetch: Vec<RowFetch>,
    /// The reduction of partial output rows: `reduce.need[q]` are the output rows rank q
    /// computes and does not own, sent to their owners (`reduce.cuts`) and added there.
    pub reduce: RowFetch,
    /// The grids considered when the plan was chosen ([`MttkrpPlan::build`]): per grid its
    /// slabs, splits and words in all (factor halos and reduction); empty when the grid was
    /// given.
    pub considered: Vec<GridWords>,
}

/// How far a grid's nonzero imbalance may exceed the least of [`MttkrpPlan::build`]'s
/// candidates and the grid still be chosen: a grid that moves fewer words by piling nonzeros
/// (the kernel's work) on one rank loses. At 1.25, on a 2000^3 tensor of 200 000 nonzeros
/// with Zipf-distributed modes, mode-1 MTTKRP at P = 16 took a grid of imbalance 1.22 to
/// save 5% of the busiest rank's words; at 1.1 the chosen imbalance stays below 1.09 there.
pub const IMBALANCE_SLACK: f64 = 1.1;

/// One grid of [`MttkrpPlan::build`]'s choice and the words it moves.
#[derive(Clone, Debug, PartialEq)]
pub struct GridWords {
    /// Slabs of the output mode.
    pub slabs: usize,
    /// The cuts within the slabs (empty: the 1D cut), as [`MttkrpPlan::splits`].
    pub splits: Vec<(usize, usize)>,
    /// Words received in all (factor halos and the reduction of partial rows).
    pub words: u64,
    /// The most words one rank moves: received and sent (what the busiest rank waits on).
    pub max_words: u64,
    /// Max nonzeros per rank over the mean.
    pub imbalance: f64,
}

impl GridWords {
    /// Whether this grid's nonzero imbalance is within [`IMBALANCE_SLACK`] of `least`.
    pub fn balanced(&self, least: f64) -> bool {
        // A relative epsilon: imbalances are ratios of counts, equal ones compare equal.
        self.imbalance <= least * IMBALANCE_SLACK * (1.0 + 1e-12)
    }
}

/// Busiest-rank words within this fraction of the fewest count as a tie, broken by the words
/// in all: on the skewed tensor of [`IMBALANCE_SLACK`]'s note, at P = 4, the strict order
/// took a grid saving 16 of 86736 words on the busiest rank for 14% more words in all.
pub const MAX_WORDS_TIE: f64 = 0.02;

/// The largest busiest-rank words that tie with `least` ([`MAX_WORDS_TIE`]).
pub fn tie_band(least: u64) -> u64 {
    least + (least as f64 * MAX_WORDS_TIE) as u64
}

/// The index of the grid [`MttkrpPlan::build`] chooses among `grids`: of those whose
/// imbalance is within [`IMBALANCE_SLACK`] of the least, the fewest words on the busiest rank
/// (up to [`MAX_WORDS_TIE`]), then the fewest in all, then the first listed (the 1D cut comes
/// first).
pub fn choose_grid(grids: &[GridWords]) -> Option<usize> {
    let least = grids
        .iter()
        .map(|g| g.imbalance)
        .fold(f64::INFINITY, f64::min);
    let balanced = || grids.iter().enumerate().filter(|(_, g)| g.balanced(least));
    let band = tie_band(balanced().map(|(_, g)| g.max_words).min()?);
    balanced()
        .filter(|(_, g)| g.max_words <= band)
        .min_by_key(|(i, g)| (g.words, g.max_words, *i))
        .map(|(i, _)| i)
}

/// Prefix sums of the nonzeros per coordinate of mode `m` over the entries `ents`.
fn mode_prefix<T: Scalar>(
    x: &SparseTensor<T>,
    m: usize,
    ents: impl Iterator<Item = usize>,
) -> Vec<usize> {
    let n = x.shape()[m];
    let mut prefix = vec![0usize; n + 1];
    for e in ents {
        prefix[x.coord(e)[m] + 1] += 1;
    }
    for i in 0..n {
        prefix[i + 1] += prefix[i];
    }
    prefix
}

/// The part of `cuts` that holds `i` (the last one starting at or before it: empty parts
/// are skipped).
fn part_of(cuts: &[usize], i: usize) -> usize {
    cuts.partition_point(|&c| c <= i) - 1
}

impl MttkrpPlan {
    /// Plans the MTTKRP of `x` in `mode` with `r`-column factors on `procs` ranks over one of
    /// every factorization of `procs` into slabs and boxes along distinct other modes, in
    /// every order ([`choose_grid`]): among the grids whose nonzero imbalance is within
    /// [`IMBALANCE_SLACK`] of the least, the one whose busiest rank moves the fewest words
    /// (factor halos and reduction, received and sent; within [`MAX_WORDS_TIE`] a tie), then
    /// the fewest words in all, then the 1D cut (`slabs = procs`), then the grid found first. [`MttkrpPlan::considered`]
    /// lists every candidate.
    pub fn build<T: Scalar>(
        x: &SparseTensor<T>,
        mode: usize,
        r: usize,
        procs: usize,
    ) -> Result<MttkrpPlan, SparseError> {
        no_ranks(procs)?;
        let one_d = MttkrpPlan::build_grid(x, mode, r, procs, &[])?;
        let mut considered = vec![one_d.grid_words()];
        // Only the figures are kept: the least imbalance is known at the end, and a plan holds
        // its halos, so the chosen grid is planned again.
        let others: Vec<usize> = (0..x.order()).filter(|&m| m != mode).collect();
        for nb in (2..=procs).filter(|&b| procs.is_multiple_of(b)) {
            for splits in split_sequences(&others, nb) {
                considered.push(MttkrpPlan::build_grid(x, mode, r, procs, &splits)?.grid_words());
            }
        }
        let pick = choose_grid(&considered).unwrap_or(0);
        let mut best = if pick == 0 {
            one_d
        } else {
            MttkrpPlan::build_grid(x, mode, r, procs, &considered[pick].splits)?
        };
        best.considered = considered;
        Ok(best)
    }

    /// Plans the MTTKRP of `x` in `mode` on `procs` ranks over a given grid: `splits` cuts
    /// each slab along its modes in turn (see [`MttkrpPlan`]); the boxes' product must divide
    /// `procs` (the rest are the slabs), the modes be distinct and differ from `mode`. No
    /// splits is the 1D cut.
    pub fn build_grid<T: Scalar>(
        x: &SparseTensor<T>,
        mode: usize,
        r: usize,
        procs: usize,
        splits: &[(usize, usize)],
    ) -> Result<MttkrpPlan, SparseError> {
        no_ranks(procs)?;
        let order = x.order();
        if mode >= order {
            return Err(SparseError::Shape(format!(
                "mode {mode} of an order-{order} tensor"
            )));
        }
        let nb: usize = splits.iter().map(|&(_, b)| b).product();
        let distinct = splits.iter().enumerate().all(|(l, &(m, b))| {
            m < order && m != mode && b >= 1 && splits[..l].iter().all(|&(n, _)| n != m)
        });
        if !distinct || nb == 0 || !procs.is_multiple_of(nb) {
            return Err(SparseError::Shape(format!(
                "grid: boxes {splits:?} (mode, parts) for {procs} ranks, output mode {mode} of an order-{order} tensor"
            )));
        }
        let ns = procs / nb;
        let shape = x.shape().to_vec();
        let out_prefix = mode_prefix(x, mode, 0..x.nnz());
        // The output rows each rank owns are the P-way nnz-balanced cut, where the factor
        // of this mode lives in every other mode's MTTKRP (as in CP-ALS); the slabs are every
        // `nb`-th of its points, which are the `ns`-way balanced cut (the same targets).
        let out_cuts = fetch::balance_rows(&out_prefix, procs);
        let slabs: Vec<usize> = out_cuts.iter().step_by(nb).copied().collect();
        // Each level cuts every box of the level before by its own nonzeros: the entries'
        // box numbers gain a digit per level and end as their ranks.
        let mut rank_of: Vec<usize> = (0..x.nnz())
            .map(|e| part_of(&slabs, x.coord(e)[mode]))
            .collect();
        let mut levels = Vec::with_capacity(splits.len());
        let mut nboxes = ns;
        for &(m, b) in splits {
            let (start, entries) = group(&rank_of, nboxes);
            let cuts: Vec<Vec<usize>> = (0..nboxes)
                .map(|q| {
                    let prefix = mode_prefix(x, m, entries[start[q]..start[q + 1]].iter().copied());
                    fetch::balance_rows(&prefix, b)
                })
                .collect();
            for (e, q) in rank_of.iter_mut().enumerate() {
                *q = *q * b + part_of(&cuts[*q], x.coord(e)[m]);
            }
            levels.push(cuts);
            nboxes *= b;
        }
        let (start, entries) = group(&rank_of, procs);
        let nnz = (0..procs).map(|q| start[q + 1] - start[q]).collect();
        let ents = |q: usize, m: usize| {
            entries[start[q]..start[q + 1]]
                .iter()
                .map(move |&e| x.coord(e)[m])
        };
        let cuts: Vec<Vec<usize>> = (0..order)
            .map(|m| {
                if m == mode {
                    out_cuts.clone()
                } else {
                    fetch::balance_rows(&mode_prefix(x, m, 0..x.nnz()), procs)
                }
            })
            .collect();
        let fetch = (0..order)
            .map(|m| {
                if m == mode {
                    RowFetch::build(shape[m], r, cuts[m].clone(), |_| std::iter::empty())
                } else {
                    RowFetch::build(shape[m], r, cuts[m].clone(), |q| ents(q, m))
                }
            })
            .collect::<Result<_, _>>()?;
        let reduce = RowFetch::build(shape[mode], r, out_cuts, |q| ents(q, mode))?;
        let mut grid = vec![1; order];
        grid[mode] = ns;
        for &(m, b) in splits {
            grid[m] = b;
        }
        Ok(MttkrpPlan {
            procs,
            mode,
            r,
            shape,
            grid,
            splits: splits.to_vec(),
            slabs,
            levels,
            cuts,
            nnz,
            fetch,
            reduce,
            considered: Vec::new(),
        })
    }

    /// This plan's grid and words, as [`MttkrpPlan::considered`] lists it.
    pub fn grid_words(&self) -> GridWords {
        GridWords {
            slabs: self.grid[self.mode],
            splits: self.splits.clone(),
            words: self.total_received(),
            max_words: self.max_words(),
            imbalance: self.imbalance(),
        }
    }

    /// The most words one rank moves, received and sent.
    pub fn max_words(&self) -> u64 {
        (0..self.procs)
            .map(|q| self.received_words(q) + self.sent_words(q))
            .max()
            .unwrap_or(0)
    }

    /// Words rank `q` receives: the factor rows its nonzeros touch and it does not hold, and
    /// the partial rows of its output rows that other ranks computed.
    pub fn received_words(&self, q: usize) -> u64 {
        self.fetch.iter().map(|f| f.received_words(q)).sum::<u64>() + self.reduce.sent_words(q)
    }

    /// Words rank `q` sends: factor rows, and its partial rows of other ranks' output rows.
    pub fn sent_words(&self, q: usize) -> u64 {
        self.fetch.iter().map(|f| f.sent_words(q)).sum::<u64>() + self.reduce.received_words(q)
    }

    /// Words of the reduction rank `q` receives (part of [`MttkrpPlan::received_words`]).
    pub fn reduction_words(&self, q: usize) -> u64 {
        self.reduce.sent_words(q)
    }

    /// Words received in all.
    pub fn total_received(&self) -> u64 {
        (0..self.procs).map(|q| self.received_words(q)).sum()
    }

    /// Words rank `q` would receive if every other mode's factor were replicated.
    pub fn replication_words(&self, q: usize) -> u64 {
        (0..self.shape.len())
            .filter(|&m| m != self.mode)
            .map(|m| self.fetch[m].replication_words(q))
            .sum()
    }

    /// Max nonzeros per rank over the mean.
    pub fn imbalance(&self) -> f64 {
        fetch::imbalance(&self.nnz)
    }

    /// Whether rank `me`'s box holds a nonzero at coordinates `c`.
    fn in_box(&self, me: usize, c: &[usize]) -> bool {
        let mut q = part_of(&self.slabs, c[self.mode]);
        for (&(m, b), cuts) in self.splits.iter().zip(&self.levels) {
            q = q * b + part_of(&cuts[q], c[m]);
        }
        q == me
    }

    /// Rank `me`'s nonzeros of `x` (the whole tensor the plan was built from), grouped by
    /// their output row (own rows, then the rows it reduces into other ranks', in
    /// `reduce.need` order) with the other modes' coordinates renumbered into the fetched
    /// factors (own rows, then halo rows): the inspector's local part, built once before any
    /// run.
    pub fn local_part<T: Scalar>(
        &self,
        x: &SparseTensor<T>,
        me: usize,
    ) -> Result<ModeGroups<T>, SparseError> {
        if x.shape() != self.shape {
            return Err(SparseError::Shape(format!(
                "tensor of shape {:?}, the plan is for {:?}",
                x.shape(),
                self.shape
            )));
        }
        let maps: Vec<Vec<usize>> = (0..self.shape.len())
            .map(|m| {
                if m == self.mode {
                    Vec::new()
                } else {
                    self.fetch[m].local_map(me)
                }
            })
            .collect();
        let rows_map = self.reduce.local_map(me);
        let rows = self.reduce.own_rows(me) + self.reduce.need[me].len();
        let g = ModeGroups::build_where(
            x,
            self.mode,
            rows,
            |c| self.in_box(me, c),
            |i| Some(rows_map[i]),
            |m, c| maps[m][c],
        )?;
        if g.others.contains(&usize::MAX) {
            return Err(SparseError::Shape(format!(
                "rank {me}: a nonzero reads a factor row in no halo"
            )));
        }
        Ok(g)
    }
}

/// Every sequence of (mode, boxes) over distinct modes of `modes`, boxes at least 2, whose
/// boxes multiply to `nb`.
fn split_sequences(modes: &[usize], nb: usize) -> Vec<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    for (i, &m) in modes.iter().enumerate() {
        for b in (2..=nb).filter(|&b| nb.is_multiple_of(b)) {
            if b == nb {
                out.push(vec![(m, b)]);
                continue;
            }
            let rest: Vec<usize> = modes
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, &n)| n)
                .collect();
            for tail in split_sequences(&rest, nb / b) {
                let mut seq = vec![(m, b)];
                seq.extend(tail);
                out.push(seq);
            }
        }
    }
    out
}

/// Per part, the start of its entries in the list, and the entries grouped by part (a
/// counting sort of `part[e]`, entries ascending within a part).
fn group(part: &[usize], parts: usize) -> (Vec<usize>, Vec<usize>) {
    let mut start = vec![0usize; parts + 1];
    for &o in part {
        start[o + 1] += 1;
    }
    for q in 0..parts {
        start[q + 1] += start[q];
    }
    let mut next = start.clone();
    let mut entries = vec![0usize; part.len()];
    for (e, &o) in part.iter().enumerate() {
        entries[next[o]] = e;
        next[o] += 1;
    }
    (start, entries)
}

/// Rank `comm.rank()`'s rows of the MTTKRP under `plan` (`plan.cuts[plan.mode]`): `local`
/// its nonzeros ([`MttkrpPlan::local_part`]), `factors_local[m]` its rows of mode m's factor
/// (`plan.cuts[m]`, `plan.r` wide; the output mode's entry is not read). Each other factor's
/// halo arrives in one exchange ([`fetch_factors`]), the rows are computed on the calling
/// rayon pool, and the partial rows of other ranks' output rows go to them in one exchange
/// ([`reduce_partial`]).
pub fn mttkrp<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &MttkrpPlan,
    local: &ModeGroups<T>,
    factors_local: &[&[T]],
) -> Result<Vec<T>, SparseError> {
    let fetched = fetch_factors(comm, plan, factors_local)?;
    let views: Vec<&[T]> = fetched.iter().map(Vec::as_slice).collect();
    let partial = kernels::mttkrp_grouped(local, &views, plan.r)?;
    reduce_partial(comm, plan, partial)
}

/// Rank `comm.rank()`'s own output rows from its partial rows (`partial`: its own rows, then
/// the rows of `plan.reduce.need`, `plan.r` wide, as [`kernels::mttkrp_grouped`] returns them
/// over [`MttkrpPlan::local_part`]): sends the others' rows to their owners and adds the rows
/// it receives, in one exchange; nothing moves (and no exchange is called) on the 1D cut.
pub fn reduce_partial<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &MttkrpPlan,
    mut partial: Vec<T>,
) -> Result<Vec<T>, SparseError> {
    let me = comm.rank();
    let red = &plan.reduce;
    let (r, own) = (plan.r, red.own_rows(me.min(plan.procs - 1)));
    if comm.size() != plan.procs || partial.len() != (own + red.need[me].len()) * r {
        return Err(SparseError::Shape(format!(
            "rank {me} of {}: {} partial elements, the plan ({} ranks) gives it {} rows of {r}",
            comm.size(),
            partial.len(),
            plan.procs,
            own + red.need.get(me).map_or(0, Vec::len)
        )));
    }
    if red.need.iter().all(Vec::is_empty) {
        return Ok(partial);
    }
    // `need` is sorted and owners hold ascending blocks: each owner's rows are a contiguous run.
    let mut at = own * r;
    let sends: Vec<(usize, Vec<T>)> = red
        .sources_of(me)
        .into_iter()
        .map(|(owner, n)| {
            let v = partial[at..at + n * r].to_vec();
            at += n * r;
            (owner, v)
        })
        .collect();
    let from = red.sends_of(me);
    let ranks: Vec<usize> = from.iter().map(|(q, _)| *q).collect();
    let recv = comm.exchange(sends, &ranks)?;
    partial.truncate(own * r);
    let lo = red.cuts[me];
    for (v, (q, rows)) in recv.iter().zip(&from) {
        if v.len() != rows.len() * r {
            return Err(SparseError::Shape(format!(
                "rank {me} received {} partial elements from rank {q}, the plan says {}",
                v.len(),
                rows.len() * r
            )));
        }
        for (&i, row) in rows.iter().zip(v.chunks_exact(r.max(1))) {
            for (o, &y) in partial[(i - lo) * r..(i - lo + 1) * r].iter_mut().zip(row) {
                *o += y;
            }
        }
    }
    Ok(partial)
}

/// The other modes' factors as rank `comm.rank()` reads them (own rows, then the halo rows),
/// in mode order: one exchange per mode. Communication only, so a caller can keep it on the
/// rank's thread and run [`kernels::mttkrp_grouped`] on a pool.
pub fn fetch_factors<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &MttkrpPlan,
    factors_local: &[&[T]],
) -> Result<Vec<Vec<T>>, SparseError> {
    let order = plan.shape.len();
    if factors_local.len() != order {
        return Err(SparseError::Shape(format!(
            "{} factors for an order-{order} tensor",
            factors_local.len()
        )));
    }
    let mut fetched: Vec<Vec<T>> = Vec::with_capacity(order - 1);
    for (m, f) in factors_local.iter().enumerate() {
        if m != plan.mode {
            fetched.push(plan.fetch[m].exchange(comm, f)?);
        }
    }
    Ok(fetched)
}
