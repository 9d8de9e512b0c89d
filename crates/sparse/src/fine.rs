//! The fine-grain SpMV `y = A x` (`ij,j->i`, A sparse and square, x and y dense; SpMM when x
//! has k columns), planned per nonzero rather than per row:
//!
//! - every vertex v (x_v and y_v together) belongs to one rank; the vertices are cut into P
//!   contiguous blocks;
//! - a cross nonzero a_ij (i on rank r, j on rank s) is computed either at r, which fetches
//!   x_j (one word reaching all of r's nonzeros in column j), or at s, which multiplies by its
//!   own x_j and pushes the partial y_i to r (one word reaching all of s's nonzeros in row
//!   i). The fewest words reaching every cross nonzero are a minimum vertex cover of a
//!   bipartite graph, found exactly ([`crate::cover`]: a maximum matching, then König's
//!   construction). Pushed partials use only the pusher's own x, so fetched x entries and
//!   pushed partials travel in one exchange (one message per pair of ranks);
//! - the work is balanced by the nonzeros both a fetch and a push reach (they may be
//!   computed at either end at no cost in words): shifts that minimise the largest load are
//!   found as a flow between ranks. A rank's work counts its nonzeros and [`VERTEX_WORK`]
//!   per vertex it owns (its rows' visits, its y and x entries), so the cut does not hand one
//!   rank all the short rows. The cut is chosen among a few candidates (from
//!   the lower-degree rule's, hubs' nonzeros weighted at their leaves, to cuts that weight the
//!   hubs more and so shrink their block): the fewest words whose balance stays within
//!   [`BALANCE_SLACK`] of the first candidate's.
//!
//! The inspector reads the whole pattern, so the words are exact: one per (rank, fetched x
//! index) and one per (rank, pushed y index), times k. The plan states them beside what the
//! 1D row cut's halo ([`crate::halo::HaloPlan`]) and replicating x would move.

use crate::cover::min_vertex_cover;
use crate::fetch::{balance_rows, imbalance};
use crate::halo::{install, Part};
use crate::{Csr, SparseError};
use deinsum_exec::{Communicator, Scalar};

/// The fine-grain plan of one SpMV/SpMM: the vertex blocks, the nonzeros each rank computes,
/// the x entries each rank fetches and the y entries each rank pushes. Size O(P + the
/// fetched and pushed entries + the pairs of ranks that shift nonzeros).
#[derive(Clone, Debug, PartialEq)]
pub struct FinePlan {
    /// Number of ranks.
    pub procs: usize,
    /// Rows (= columns) of A: the vertices.
    pub n: usize,
    /// Columns of x and y (1 for SpMV).
    pub k: usize,
    /// Rank r owns vertices `cuts[r]..cuts[r + 1]`: those rows of x and of y.
    pub cuts: Vec<usize>,
    /// Nonzeros each rank computes.
    pub nnz: Vec<usize>,
    /// Per rank, the remote x rows it fetches (sorted).
    pub fetch: Vec<Vec<usize>>,
    /// Per rank, the remote y rows it pushes a partial sum of to their owners (sorted).
    pub push: Vec<Vec<usize>>,
    /// `(r, s, m)`, sorted, m > 0: of the nonzeros on rank r's rows and rank s's columns that
    /// both a fetch (x_j to r) and a push (y_i from s) reach, the first m in row-major order
    /// are computed at s, the rest at r (the balance's only lever, costing no words). Every
    /// other cross nonzero is computed at r when x_j is fetched, else at s.
    pub shifted: Vec<(usize, usize, usize)>,
}

/// Row plus column nonzeros of every vertex of square `a`.
fn degrees<T>(a: &Csr<T>) -> Vec<usize> {
    let mut deg: Vec<usize> = a.indptr.windows(2).map(|w| w[1] - w[0]).collect();
    for &j in &a.indices {
        deg[j] += 1;
    }
    deg
}

/// The part of sorted `list` within `lo..hi`.
fn within(list: &[usize], lo: usize, hi: usize) -> &[usize] {
    let a = list.partition_point(|&v| v < lo);
    let b = list.partition_point(|&v| v < hi);
    &list[a..b]
}

/// The words of one set of vertex blocks: the minimum cover of the cross nonzeros, the
/// nonzeros each rank computes when every doubly reached nonzero stays at its row's owner,
/// and how many of those each ordered pair (r, s) could shift to s.
struct Covered {
    fetch: Vec<Vec<usize>>,
    push: Vec<Vec<usize>>,
    nnz: Vec<usize>,
    free: Vec<(usize, usize, usize)>,
}

/// For vertex blocks `cuts`, the fewest words that reach every cross nonzero a_ij (owner r of
/// i, owner s of j, r != s): rank r fetching x_j reaches r's nonzeros in column j, rank s
/// pushing y_i reaches s's in row i, so the words are a vertex cover of the bipartite graph
/// of the cross nonzeros (left: pushed (i, s), right: fetched (j, r); the ordered pairs of
/// ranks fall into disjoint parts of one graph), and its minimum is found exactly
/// ([`min_vertex_cover`]).
fn cover_cross<T>(a: &Csr<T>, cuts: &[usize]) -> Result<Covered, SparseError> {
    let (n, procs) = (a.nrows, cuts.len() - 1);
    let mut owner = vec![0usize; n];
    for r in 0..procs {
        owner[cuts[r]..cuts[r + 1]].fill(r);
    }
    let mut nnz = vec![0usize; procs];
    // Right vertices (j, r) numbered as met: rows are visited in ascending order, so r never
    // decreases and one mark per column tells whether (j, r) has a number yet.
    let (mut mark, mut rid) = (vec![usize::MAX; n], vec![0u32; n]);
    let mut right: Vec<(usize, usize)> = Vec::new();
    // Left vertices (i, s): a row's columns ascend and blocks are contiguous, so a row's cross
    // nonzeros come grouped by s.
    let mut left: Vec<(usize, usize)> = Vec::new();
    let (mut ptr, mut adj) = (vec![0usize], Vec::new());
    for i in 0..n {
        let r = owner[i];
        for &j in &a.indices[a.indptr[i]..a.indptr[i + 1]] {
            let s = owner[j];
            if s == r {
                nnz[r] += 1;
                continue;
            }
            if left.last() != Some(&(i, s)) {
                left.push((i, s));
                ptr.push(adj.len());
            }
            if mark[j] != r {
                mark[j] = r;
                rid[j] = u32::try_from(right.len())
                    .ok()
                    .filter(|&id| id < u32::MAX)
                    .ok_or_else(|| {
                        SparseError::Shape("2^32 - 1 or more (column, rank) pairs to cover".into())
                    })?;
                right.push((j, r));
            }
            adj.push(rid[j]);
            *ptr.last_mut().expect("a left vertex was pushed") = adj.len();
        }
    }
    if left.len() >= u32::MAX as usize {
        return Err(SparseError::Shape(
            "2^32 - 1 or more (row, rank) pairs to cover".into(),
        ));
    }
    let cover = min_vertex_cover(&ptr, &adj, right.len());
    let (mut fetch, mut push) = (vec![Vec::new(); procs], vec![Vec::new(); procs]);
    for (&(j, r), _) in right.iter().zip(&cover.right).filter(|(_, &c)| c) {
        fetch[r].push(j);
    }
    for (&(i, s), _) in left.iter().zip(&cover.left).filter(|(_, &c)| c) {
        push[s].push(i);
    }
    let mut free = vec![0usize; procs * procs];
    for (u, &(i, s)) in left.iter().enumerate() {
        for &v in &adj[ptr[u]..ptr[u + 1]] {
            let fetched = cover.right[v as usize];
            nnz[if fetched { owner[i] } else { s }] += 1;
            if fetched && cover.left[u] {
                free[owner[i] * procs + s] += 1;
            }
        }
    }
    for f in &mut fetch {
        f.sort_unstable();
    }
    let free = (0..procs * procs)
        .filter(|&p| free[p] > 0)
        .map(|p| (p / procs, p % procs, free[p]))
        .collect();
    Ok(Covered {
        fetch,
        push,
        nnz,
        free,
    })
}

/// The most flow from the ranks above `cap` to those below it along the arcs `(r, s, c)`
/// (at most c from r to s), as `(r, s, flow)` per arc; Edmonds-Karp on the P ranks.
fn shift_flow(load: &[usize], cap: usize, arcs: &[(usize, usize, usize)]) -> (usize, Vec<usize>) {
    let procs = load.len();
    let mut flow = vec![0usize; arcs.len()];
    let mut excess: Vec<usize> = load.iter().map(|&l| l.saturating_sub(cap)).collect();
    let mut room: Vec<usize> = load.iter().map(|&l| cap.saturating_sub(l)).collect();
    // The arcs at each rank, either end, so a search step costs its rank's arcs only.
    let mut at: Vec<Vec<usize>> = vec![Vec::new(); procs];
    for (e, &(from, to, _)) in arcs.iter().enumerate() {
        at[from].push(e);
        at[to].push(e);
    }
    let mut total = 0;
    loop {
        // Breadth-first from every rank with excess over residual arcs (forward: capacity
        // left; backward: flow to cancel), to a rank with room.
        let mut via: Vec<Option<(usize, bool)>> = vec![None; procs];
        let mut seen: Vec<bool> = excess.iter().map(|&e| e > 0).collect();
        let mut queue: Vec<usize> = (0..procs).filter(|&r| seen[r]).collect();
        let mut head = 0;
        let mut sink = None;
        while head < queue.len() && sink.is_none() {
            let r = queue[head];
            head += 1;
            for &e in &at[r] {
                let (from, to, c) = arcs[e];
                let step = if from == r && flow[e] < c && !seen[to] {
                    Some((to, true))
                } else if to == r && flow[e] > 0 && !seen[from] {
                    Some((from, false))
                } else {
                    None
                };
                if let Some((q, forward)) = step {
                    seen[q] = true;
                    via[q] = Some((e, forward));
                    queue.push(q);
                    if room[q] > 0 {
                        sink = Some(q);
                        break;
                    }
                }
            }
        }
        let Some(end) = sink else {
            return (total, flow);
        };
        // The bottleneck along the path back to its source, then the augmentation.
        let mut amount = room[end];
        let mut q = end;
        while let Some((e, forward)) = via[q] {
            let (from, to, c) = arcs[e];
            amount = amount.min(if forward { c - flow[e] } else { flow[e] });
            q = if forward { from } else { to };
        }
        amount = amount.min(excess[q]);
        let source = q;
        let mut q = end;
        while let Some((e, forward)) = via[q] {
            let (from, to, _) = arcs[e];
            if forward {
                flow[e] += amount;
                q = from;
            } else {
                flow[e] -= amount;
                q = to;
            }
        }
        excess[source] -= amount;
        room[end] -= amount;
        total += amount;
    }
}

/// The shifts of doubly reached nonzeros (`free`, per ordered pair (r, s): how many of r's
/// could be computed at s) that make the largest load the least, and the loads after them:
/// the least cap whose excess all flows to ranks under it (found by bisection).
fn balance(
    nnz: &[usize],
    free: &[(usize, usize, usize)],
) -> (Vec<(usize, usize, usize)>, Vec<usize>) {
    let total: usize = nnz.iter().sum();
    let (mut lo, mut hi) = (
        total.div_ceil(nnz.len()),
        nnz.iter().copied().max().unwrap_or(0),
    );
    let excess = |cap: usize| nnz.iter().map(|&l| l.saturating_sub(cap)).sum::<usize>();
    // Invariant: hi is reachable; lo - 1 is not (no cap under the mean is).
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if shift_flow(nnz, mid, free).0 == excess(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let (_, flow) = shift_flow(nnz, hi, free);
    let mut loads = nnz.to_vec();
    let mut shifted = Vec::new();
    for (&(r, s, _), &f) in free.iter().zip(&flow) {
        if f > 0 {
            loads[r] -= f;
            loads[s] += f;
            shifted.push((r, s, f));
        }
    }
    (shifted, loads)
}

/// Cut candidates: the weights of each nonzero at its lower- and its higher-degree end when
/// the vertices are cut by weight. The first is the lower-degree rule's cut (the hubs'
/// nonzeros at their leaves: the largest hub block); the next weight the hubs more, shrinking
/// their block, which moves fewer words while the cover's shifts can restore the balance.
pub const END_WEIGHTS: [(usize, usize); 5] = [(1, 0), (3, 1), (1, 1), (1, 3), (0, 1)];

/// A vertex's work in nonzeros: a rank visits each of its rows in two passes (its own and
/// its fetched columns), writes its y entry and gathers its x entry from a block that stays
/// cold (a vertex of low degree is reused little). On R-MAT scale 18 at P=2, balancing the
/// nonzeros alone gave the rank of the short rows 4x the vertices and twice the time. Per
/// vertex, 4-6 made SpMM (k=16) fastest, SpMV (k=1) gained up to 16, and the words grow with
/// the weight (the hub block widens): 6 keeps them within a quarter of replicating x there
/// (crates/sparse/benches/RESULTS.md).
pub const VERTEX_WORK: usize = 6;

/// A candidate's balance counts as kept when its imbalance is within this of the first
/// candidate's (the lower-degree rule's cut, balanced).
pub const BALANCE_SLACK: f64 = 0.01;

impl FinePlan {
    /// Plans `A x` (x `a.ncols x k`) on `procs` ranks from A's whole pattern (every rank can
    /// build the same plan from the same pattern). A must be square. For each candidate cut
    /// ([`END_WEIGHTS`], the lower-degree rule's first, until one's balance is beyond
    /// reach) the cross nonzeros get their minimum cover and the doubly reached ones are
    /// shifted to balance the work ([`FinePlan::work`]); the plan is the candidate with the
    /// fewest words among those whose work imbalance is within [`BALANCE_SLACK`] of the
    /// first's.
    pub fn build<T: Scalar>(a: &Csr<T>, k: usize, procs: usize) -> Result<FinePlan, SparseError> {
        if procs == 0 {
            return Err(SparseError::Shape(
                "the number of ranks must be at least 1".into(),
            ));
        }
        if a.nrows != a.ncols {
            return Err(SparseError::Shape(format!(
                "the fine-grain SpMV needs a square matrix, not {} x {}",
                a.nrows, a.ncols
            )));
        }
        let n = a.nrows;
        let deg = degrees(a);
        let mut plans: Vec<FinePlan> = Vec::new();
        for (at_low, at_high) in END_WEIGHTS {
            let mut load = vec![0usize; n + 1];
            for i in 0..n {
                for &j in &a.indices[a.indptr[i]..a.indptr[i + 1]] {
                    let (low, high) = if deg[i] <= deg[j] { (i, j) } else { (j, i) };
                    load[low + 1] += at_low;
                    load[high + 1] += at_high;
                }
            }
            // A vertex weighs VERTEX_WORK nonzeros, in this candidate's units per nonzero.
            let vertex = VERTEX_WORK * (at_low + at_high);
            for v in 0..n {
                load[v + 1] += load[v] + vertex;
            }
            let cuts = balance_rows(&load, procs);
            if plans.iter().any(|p| p.cuts == cuts) {
                continue;
            }
            let covered = cover_cross(a, &cuts)?;
            let fixed = |r: usize| VERTEX_WORK * (cuts[r + 1] - cuts[r]);
            let base: Vec<usize> = (0..procs).map(|r| covered.nnz[r] + fixed(r)).collect();
            let (shifted, work) = balance(&base, &covered.free);
            let nnz = (0..procs).map(|r| work[r] - fixed(r)).collect();
            plans.push(FinePlan {
                procs,
                n,
                k,
                cuts,
                nnz,
                fetch: covered.fetch,
                push: covered.push,
                shifted,
            });
            // Lighter low ends shrink the hub block: fewer words, more to rebalance. Once a
            // candidate's balance is out of reach, the lighter ones are further out.
            if plans[plans.len() - 1].work_imbalance() > plans[0].work_imbalance() + BALANCE_SLACK {
                break;
            }
        }
        let first = plans[0].work_imbalance();
        let chosen = plans
            .into_iter()
            .filter(|p| p.work_imbalance() <= first + BALANCE_SLACK)
            .min_by_key(FinePlan::total_received)
            .expect("the first candidate is within the slack");
        Ok(chosen)
    }

    /// How many of the doubly reached nonzeros on rank r's rows and rank s's columns are
    /// computed at s ([`FinePlan::shifted`]).
    pub fn shifted_to(&self, r: usize, s: usize) -> usize {
        self.shifted
            .binary_search_by(|&(a, b, _)| (a, b).cmp(&(r, s)))
            .map_or(0, |p| self.shifted[p].2)
    }
    /// The rank that owns vertex `v`.
    pub fn owner(&self, v: usize) -> usize {
        self.cuts.partition_point(|&c| c <= v) - 1
    }

    /// Vertices rank `r` owns.
    pub fn own_rows(&self, r: usize) -> usize {
        self.cuts[r + 1] - self.cuts[r]
    }

    /// Per destination, the x rows of rank `r`'s block it sends there (ascending destinations).
    fn x_sends(&self, r: usize) -> impl Iterator<Item = (usize, &[usize])> {
        let (lo, hi) = (self.cuts[r], self.cuts[r + 1]);
        (0..self.procs)
            .filter(move |&q| q != r)
            .map(move |q| (q, within(&self.fetch[q], lo, hi)))
    }

    /// Per source, the y rows of rank `r`'s block it pushes partial sums of to `r`.
    fn y_receives(&self, r: usize) -> impl Iterator<Item = (usize, &[usize])> {
        let (lo, hi) = (self.cuts[r], self.cuts[r + 1]);
        (0..self.procs)
            .filter(move |&s| s != r)
            .map(move |s| (s, within(&self.push[s], lo, hi)))
    }

    /// Per source, the x rows rank `r` fetches from it and the y rows it pushes to `r`
    /// (sources with neither left out).
    fn sources(&self, r: usize) -> Vec<(usize, usize, &[usize])> {
        self.y_receives(r)
            .map(|(s, ys)| {
                let nx = within(&self.fetch[r], self.cuts[s], self.cuts[s + 1]).len();
                (s, nx, ys)
            })
            .filter(|&(_, nx, ys)| nx + ys.len() > 0)
            .collect()
    }

    /// Words rank `r` receives: the x rows it fetches and the partial y rows pushed to it,
    /// times k.
    pub fn received_words(&self, r: usize) -> u64 {
        let pushed: usize = self.y_receives(r).map(|(_, ys)| ys.len()).sum();
        ((self.fetch[r].len() + pushed) * self.k) as u64
    }

    /// Words rank `r` sends: the x rows of its block others fetch and the partial y rows it
    /// pushes, times k.
    pub fn sent_words(&self, r: usize) -> u64 {
        let fetched: usize = self.x_sends(r).map(|(_, v)| v.len()).sum();
        ((fetched + self.push[r].len()) * self.k) as u64
    }

    /// Max over ranks of words received.
    pub fn max_received(&self) -> u64 {
        (0..self.procs)
            .map(|r| self.received_words(r))
            .max()
            .unwrap_or(0)
    }

    /// Words received over all ranks (= words sent over all ranks).
    pub fn total_received(&self) -> u64 {
        (0..self.procs).map(|r| self.received_words(r)).sum()
    }

    /// Words rank `r` would receive if x were replicated (an all-gather of the other blocks).
    pub fn replication_words(&self, r: usize) -> u64 {
        ((self.n - self.own_rows(r)) * self.k) as u64
    }

    /// Max computed nonzeros per rank over the mean (1 is perfect balance).
    pub fn imbalance(&self) -> f64 {
        imbalance(&self.nnz)
    }

    /// Rank `r`'s work: its computed nonzeros plus [`VERTEX_WORK`] per vertex it owns.
    pub fn work(&self, r: usize) -> usize {
        self.nnz[r] + VERTEX_WORK * self.own_rows(r)
    }

    /// Max work per rank over the mean ([`FinePlan::work`]): what the cut and the shifts
    /// balance.
    pub fn work_imbalance(&self) -> f64 {
        imbalance(&(0..self.procs).map(|r| self.work(r)).collect::<Vec<_>>())
    }
}

/// A rank's nonzeros as the fine-grain SpMV computes them (the inspector's local part, built
/// once before any run), in three parts: those on its own rows and columns, those on its rows
/// with a fetched column (numbered in `fetch` order), and those on its columns whose rows it
/// pushes (rows numbered in `push` order).
#[derive(Clone, Debug, PartialEq)]
pub struct FineLocal<T> {
    rank: usize,
    rows: usize,
    own: Part<T>,
    fetched: Part<T>,
    pushed: Part<T>,
}

impl<T: Scalar> FineLocal<T> {
    /// Rank `me`'s nonzeros of `a` (the whole matrix, which every rank holds, as the pattern
    /// the plan was built from) under `plan`.
    pub fn build(plan: &FinePlan, me: usize, a: &Csr<T>) -> Result<Self, SparseError> {
        if me >= plan.procs {
            return Err(SparseError::Shape(format!(
                "rank {me} in a plan for {} ranks",
                plan.procs
            )));
        }
        if a.nrows != plan.n || a.ncols != plan.n {
            return Err(SparseError::Shape(format!(
                "a {} x {} matrix under a plan for {} vertices",
                a.nrows, a.ncols, plan.n
            )));
        }
        let (lo, hi) = (plan.cuts[me], plan.cuts[me + 1]);
        let mine = |v: usize| (lo..hi).contains(&v);
        let missing = |what: &str, v: usize| {
            SparseError::Shape(format!(
                "rank {me}: {what} {v} is not in the plan (a different pattern?)"
            ))
        };
        let empty = |nrows, ncols| Csr {
            nrows,
            ncols,
            indptr: vec![0],
            indices: Vec::new(),
            vals: Vec::new(),
        };
        let mut own = empty(hi - lo, hi - lo);
        let mut fetched = empty(hi - lo, plan.fetch[me].len());
        // Doubly reached nonzeros are computed at the column's owner for the first
        // `shifted_to` of each pair in row-major order: counted per peer on both sides.
        let (mut quota, mut met) = (vec![0usize; plan.procs], vec![0usize; plan.procs]);
        for (s, q) in quota.iter_mut().enumerate() {
            *q = plan.shifted_to(me, s);
        }
        // This rank's rows: both ends its own, or the row side with a fetched column (unless
        // shifted); the rest are computed by the column's owner, which pushes y_i.
        for i in lo..hi {
            for p in a.indptr[i]..a.indptr[i + 1] {
                let (j, v) = (a.indices[p], a.vals[p]);
                if mine(j) {
                    own.indices.push(j - lo);
                    own.vals.push(v);
                    continue;
                }
                let s = plan.owner(j);
                let pushed = plan.push[s].binary_search(&i).is_ok();
                match plan.fetch[me].binary_search(&j) {
                    Ok(at) => {
                        let here = !pushed || {
                            met[s] += 1;
                            met[s] > quota[s]
                        };
                        if here {
                            fetched.indices.push(at);
                            fetched.vals.push(v);
                        }
                    }
                    Err(_) if pushed => {}
                    Err(_) => return Err(missing("nonzero in row", i)),
                }
            }
            own.indptr.push(own.indices.len());
            fetched.indptr.push(fetched.indices.len());
        }
        for (r, q) in quota.iter_mut().enumerate() {
            *q = plan.shifted_to(r, me);
        }
        met.fill(0);
        // Column-side nonzeros on remote rows: one row of partial sums per pushed y row.
        let mut pushed = empty(plan.push[me].len(), hi - lo);
        for &i in &plan.push[me] {
            let r = plan.owner(i);
            for p in a.indptr[i]..a.indptr[i + 1] {
                let j = a.indices[p];
                if !mine(j) {
                    continue;
                }
                let here = plan.fetch[r].binary_search(&j).is_err() || {
                    met[r] += 1;
                    met[r] <= quota[r]
                };
                if here {
                    pushed.indices.push(j - lo);
                    pushed.vals.push(a.vals[p]);
                }
            }
            pushed.indptr.push(pushed.indices.len());
        }
        let computed = own.nnz() + fetched.nnz() + pushed.nnz();
        if computed != plan.nnz[me] {
            return Err(SparseError::Shape(format!(
                "rank {me} computes {computed} nonzeros; the plan gives it {}",
                plan.nnz[me]
            )));
        }
        Ok(FineLocal {
            rank: me,
            rows: hi - lo,
            own: Part::of(own),
            fetched: Part::of(fetched),
            pushed: Part::of(pushed),
        })
    }

    /// Nonzeros on own rows and columns, on own rows with fetched columns, on own columns
    /// with pushed rows.
    pub fn nnz_split(&self) -> (usize, usize, usize) {
        (self.own.nnz(), self.fetched.nnz(), self.pushed.nnz())
    }
}

/// Rank `comm.rank()`'s rows of `y = A x` under `plan` from its prepared nonzeros
/// ([`FineLocal::build`]) and its block of x (`plan.cuts`, row-major, `plan.k` wide): computes
/// the partial sums it pushes, sends them with the x rows others fetch in one exchange,
/// multiplies its own part while the messages are in flight, then adds the fetched columns'
/// part and the partial sums pushed to it. The kernels run on `pool` (the calling pool when
/// `None`); the communication stays on the calling thread.
pub fn spmv_local<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &FinePlan,
    local: &FineLocal<T>,
    x_local: &[T],
    pool: Option<&rayon::ThreadPool>,
) -> Result<Vec<T>, SparseError> {
    let me = comm.rank();
    if comm.size() != plan.procs {
        return Err(SparseError::Shape(format!(
            "plan for {} ranks run on {}",
            plan.procs,
            comm.size()
        )));
    }
    if local.rank != me {
        return Err(SparseError::Shape(format!(
            "nonzeros prepared for rank {} used on rank {me}",
            local.rank
        )));
    }
    let (k, lo) = (plan.k, plan.cuts[me]);
    if x_local.len() != local.rows * k {
        return Err(SparseError::Shape(format!(
            "rank {me} holds {} elements of x; the plan gives it {} rows of {k}",
            x_local.len(),
            local.rows
        )));
    }
    let partial = if local.pushed.nnz() > 0 {
        install(pool, || local.pushed.spmm(x_local, k))?
    } else {
        vec![T::default(); plan.push[me].len() * k]
    };
    // One message per peer: the x rows it fetches from this block, then the partial sums of
    // its rows this rank pushes (both in ascending rows).
    let mut sends = Vec::new();
    for (q, xs) in plan.x_sends(me) {
        let (qlo, qhi) = (plan.cuts[q], plan.cuts[q + 1]);
        let start = plan.push[me].partition_point(|&i| i < qlo);
        let ys = plan.push[me][start..].partition_point(|&i| i < qhi);
        if xs.is_empty() && ys == 0 {
            continue;
        }
        let mut buf = Vec::with_capacity((xs.len() + ys) * k);
        for &j in xs {
            buf.extend_from_slice(&x_local[(j - lo) * k..(j - lo + 1) * k]);
        }
        buf.extend_from_slice(&partial[start * k..(start + ys) * k]);
        sends.push((q, buf));
    }
    drop(partial);
    let from_rows = plan.sources(me);
    let from: Vec<(usize, usize)> = from_rows
        .iter()
        .map(|&(s, nx, ys)| (s, (nx + ys.len()) * k))
        .collect();
    let (recv, y) = comm.exchange_while(sends, &from, || {
        install(pool, || local.own.spmm(x_local, k))
    })?;
    let mut y = y?;
    let mut halo = Vec::with_capacity(plan.fetch[me].len() * k);
    for (msg, &(s, nx, ys)) in recv.iter().zip(&from_rows) {
        if msg.len() != (nx + ys.len()) * k {
            return Err(SparseError::Shape(format!(
                "rank {me} received {} elements from rank {s}, the plan says {}",
                msg.len(),
                (nx + ys.len()) * k
            )));
        }
        // Sources ascend and own ascending blocks: the x rows concatenate in `fetch` order.
        halo.extend_from_slice(&msg[..nx * k]);
        for (&i, part) in ys.iter().zip(msg[nx * k..].chunks_exact(k.max(1))) {
            for (d, &v) in y[(i - lo) * k..(i - lo + 1) * k].iter_mut().zip(part) {
                *d += v;
            }
        }
    }
    if local.fetched.nnz() > 0 {
        install(pool, || local.fetched.spmm_into(&halo, k, &mut y, true))?;
    }
    Ok(y)
}

/// [`spmv_local`] with the nonzeros prepared in the call: `a` is the whole matrix.
pub fn spmv<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &FinePlan,
    a: &Csr<T>,
    x_local: &[T],
) -> Result<Vec<T>, SparseError> {
    let local = FineLocal::build(plan, comm.rank(), a)?;
    spmv_local(comm, plan, &local, x_local, None)
}
