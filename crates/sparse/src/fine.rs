//! The fine-grain SpMV `y = A x` (`ij,j->i`, A sparse and square, x and y dense; SpMM when x
//! has k columns), planned per nonzero rather than per row:
//!
//! - every vertex v (x_v and y_v together) belongs to one rank; the vertices are cut into P
//!   contiguous blocks balanced by the nonzeros each rank computes;
//! - nonzero a_ij is computed by the owner of its endpoint of lower degree (row plus column
//!   nonzeros; a tie goes to the row i): a power-law matrix's hubs then send or receive little,
//!   their many nonzeros being computed at the other, low-degree, ends;
//! - the owner of i computing a_ij fetches x_j when j is remote; the owner of j computing it
//!   multiplies by its own x_j and pushes the partial y_i to the owner of i. Pushed partials
//!   use only the pusher's own x, so fetched x entries and pushed partials travel in one
//!   exchange (one message per pair of ranks).
//!
//! The inspector reads the whole pattern, so the words are exact: one per (rank, fetched x
//! index) and one per (rank, pushed y index), times k. The plan states them beside what the
//! 1D row cut's halo ([`crate::halo::HaloPlan`]) and replicating x would move.

use crate::fetch::{balance_rows, imbalance};
use crate::halo::{install, Part};
use crate::{Csr, SparseError};
use deinsum_exec::{Communicator, Scalar};

/// The fine-grain plan of one SpMV/SpMM: the vertex blocks, the nonzeros each rank computes,
/// the x entries each rank fetches and the y entries each rank pushes. Size O(P + the
/// fetched and pushed entries).
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

impl FinePlan {
    /// Plans `A x` (x `a.ncols x k`) on `procs` ranks from A's whole pattern (every rank can
    /// build the same plan from the same pattern). A must be square.
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
        // Nonzeros computed at each vertex, as prefix sums for the balanced cut.
        let mut load = vec![0usize; n + 1];
        for i in 0..n {
            for &j in &a.indices[a.indptr[i]..a.indptr[i + 1]] {
                load[if deg[i] <= deg[j] { i } else { j } + 1] += 1;
            }
        }
        for v in 0..n {
            load[v + 1] += load[v];
        }
        let cuts = balance_rows(&load, procs);
        let owner = |v: usize| cuts.partition_point(|&c| c <= v) - 1;
        let mut nnz = vec![0usize; procs];
        let (mut fetch, mut push) = (vec![Vec::new(); procs], vec![Vec::new(); procs]);
        // Rows are visited in order, so a rank's row-side nonzeros come together: one mark per
        // x row suffices to count it once per fetching rank; a row's pushes are deduplicated
        // by a mark per rank, and arrive at each rank's list in ascending rows.
        let (mut fetched_by, mut pushed_row) = (vec![usize::MAX; n], vec![usize::MAX; procs]);
        for i in 0..n {
            let oi = owner(i);
            for &j in &a.indices[a.indptr[i]..a.indptr[i + 1]] {
                if deg[i] <= deg[j] {
                    nnz[oi] += 1;
                    if owner(j) != oi && fetched_by[j] != oi {
                        fetched_by[j] = oi;
                        fetch[oi].push(j);
                    }
                } else {
                    let oj = owner(j);
                    nnz[oj] += 1;
                    if oj != oi && pushed_row[oj] != i {
                        pushed_row[oj] = i;
                        push[oj].push(i);
                    }
                }
            }
        }
        for f in &mut fetch {
            f.sort_unstable();
        }
        Ok(FinePlan {
            procs,
            n,
            k,
            cuts,
            nnz,
            fetch,
            push,
        })
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
        let deg = degrees(a);
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
        // This rank's rows: both ends its own (computed here whatever the degrees), or the
        // row side with a fetched column; the rest are computed by the column's owner.
        for i in lo..hi {
            for p in a.indptr[i]..a.indptr[i + 1] {
                let (j, v) = (a.indices[p], a.vals[p]);
                if mine(j) {
                    own.indices.push(j - lo);
                    own.vals.push(v);
                } else if deg[i] <= deg[j] {
                    let at = plan.fetch[me]
                        .binary_search(&j)
                        .map_err(|_| missing("column", j))?;
                    fetched.indices.push(at);
                    fetched.vals.push(v);
                }
            }
            own.indptr.push(own.indices.len());
            fetched.indptr.push(fetched.indices.len());
        }
        // Column-side nonzeros on remote rows: one row of partial sums per pushed y row.
        let mut pushed = empty(plan.push[me].len(), hi - lo);
        for &i in &plan.push[me] {
            for p in a.indptr[i]..a.indptr[i + 1] {
                let j = a.indices[p];
                if mine(j) && deg[i] > deg[j] {
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
    let mut partial = vec![T::default(); plan.push[me].len() * k];
    if local.pushed.nnz() > 0 {
        install(pool, || {
            local.pushed.spmm_into(x_local, k, &mut partial, false)
        })?;
    }
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
        let mut y = vec![T::default(); local.rows * k];
        install(pool, || local.own.spmm_into(x_local, k, &mut y, false)).map(|_| y)
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
