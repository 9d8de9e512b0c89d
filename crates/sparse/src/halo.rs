//! The distributed SpMM `C = A B` (`ij,jk->ik`, A sparse, B and C dense; SpMV for k = 1),
//! planned from A's pattern (seed 003's ghost exchange):
//!
//! - A's rows (and C's) are cut into P contiguous parts balanced by nonzeros, not by rows;
//! - B's rows are cut the same way when A is square (the vector follows the matrix's rows),
//!   else into P balanced blocks;
//! - the inspector reads the pattern: rank r needs the rows of B that its nonzeros touch and it
//!   does not own, and receives exactly those from their owners, so the predicted words are
//!   exact (the communicator's count is held against them in the tests), beside what
//!   replicating B (an all-gather) would move.

use crate::{Csr, SparseError};
use deinsum_exec::{Communicator, Scalar};

/// Cut points `0 = c_0 <= ... <= c_P = rows` of contiguous row parts with nonzero counts as
/// even as whole rows allow: part r ends at the first row boundary where the prefix count
/// reaches `(r + 1) * nnz / P`.
pub fn balance_rows(indptr: &[usize], parts: usize) -> Vec<usize> {
    let rows = indptr.len().saturating_sub(1);
    let nnz = indptr.last().copied().unwrap_or(0) as u128;
    let mut cuts = Vec::with_capacity(parts + 1);
    cuts.push(0);
    for r in 1..parts {
        let target = (nnz * r as u128 / parts as u128) as usize;
        let prev = *cuts.last().unwrap_or(&0);
        // The first row boundary at or past the target, never before the previous cut.
        let at = indptr[prev..].partition_point(|&p| p < target) + prev;
        cuts.push(at.min(rows));
    }
    cuts.push(rows);
    cuts
}

/// The plan of one distributed SpMM: the row parts, and for every rank the rows of B it
/// receives. Size O(P + halo rows).
#[derive(Clone, Debug, PartialEq)]
pub struct HaloPlan {
    /// Number of ranks.
    pub procs: usize,
    /// Columns of B and C.
    pub k: usize,
    /// Rows of B.
    pub b_rows: usize,
    /// Rank r holds rows `a_cuts[r]..a_cuts[r + 1]` of A and C.
    pub a_cuts: Vec<usize>,
    /// Rank r holds rows `b_cuts[r]..b_cuts[r + 1]` of B.
    pub b_cuts: Vec<usize>,
    /// Nonzeros of A per rank.
    pub nnz: Vec<usize>,
    /// Per rank, the rows of B it receives (sorted, none of its own).
    pub need: Vec<Vec<usize>>,
}

impl HaloPlan {
    /// Plans `A (CSR) * B (a.ncols x k)` on `procs` ranks from A's whole pattern (every rank
    /// can build the same plan from the same pattern).
    pub fn build<T: Scalar>(a: &Csr<T>, k: usize, procs: usize) -> Result<HaloPlan, SparseError> {
        if procs == 0 {
            return Err(SparseError::Shape(
                "the number of ranks must be at least 1".into(),
            ));
        }
        let a_cuts = balance_rows(&a.indptr, procs);
        let b_cuts = if a.nrows == a.ncols {
            a_cuts.clone()
        } else {
            (0..=procs).map(|r| r * a.ncols / procs).collect()
        };
        let mut need = Vec::with_capacity(procs);
        let mut nnz = Vec::with_capacity(procs);
        let mut seen = vec![usize::MAX; a.ncols];
        for r in 0..procs {
            let (lo, hi) = (a.indptr[a_cuts[r]], a.indptr[a_cuts[r + 1]]);
            nnz.push(hi - lo);
            let own = b_cuts[r]..b_cuts[r + 1];
            let mut rows: Vec<usize> = Vec::new();
            for &j in &a.indices[lo..hi] {
                if !own.contains(&j) && seen[j] != r {
                    seen[j] = r;
                    rows.push(j);
                }
            }
            rows.sort_unstable();
            need.push(rows);
        }
        Ok(HaloPlan {
            procs,
            k,
            b_rows: a.ncols,
            a_cuts,
            b_cuts,
            nnz,
            need,
        })
    }

    /// The rank that owns row `j` of B.
    pub fn owner(&self, j: usize) -> usize {
        self.b_cuts.partition_point(|&c| c <= j) - 1
    }

    /// Words rank `r` receives: its halo rows times k.
    pub fn received_words(&self, r: usize) -> u64 {
        (self.need[r].len() * self.k) as u64
    }

    /// Words rank `r` sends: the rows of its block that other ranks need, times k.
    pub fn sent_words(&self, r: usize) -> u64 {
        let own = self.b_cuts[r]..self.b_cuts[r + 1];
        let rows: usize = (0..self.procs)
            .filter(|&q| q != r)
            .map(|q| self.need[q].iter().filter(|j| own.contains(j)).count())
            .sum();
        (rows * self.k) as u64
    }

    /// Max over ranks of words received.
    pub fn max_received(&self) -> u64 {
        (0..self.procs)
            .map(|r| self.received_words(r))
            .max()
            .unwrap_or(0)
    }

    /// Words received over all ranks.
    pub fn total_received(&self) -> u64 {
        (0..self.procs).map(|r| self.received_words(r)).sum()
    }

    /// Words rank `r` would receive if B were replicated (an all-gather of the other blocks).
    pub fn replication_words(&self, r: usize) -> u64 {
        ((self.b_rows - (self.b_cuts[r + 1] - self.b_cuts[r])) * self.k) as u64
    }

    /// Max nonzeros per rank over the mean (1 is perfect balance).
    pub fn imbalance(&self) -> f64 {
        let total: usize = self.nnz.iter().sum();
        if total == 0 {
            return 1.0;
        }
        let max = self.nnz.iter().copied().max().unwrap_or(0);
        max as f64 * self.procs as f64 / total as f64
    }

    /// Per destination, the rows of rank `r`'s block of B that it sends there (ascending
    /// destinations, rows sorted).
    fn sends_of(&self, r: usize) -> Vec<(usize, Vec<usize>)> {
        let own = self.b_cuts[r]..self.b_cuts[r + 1];
        (0..self.procs)
            .filter(|&q| q != r)
            .filter_map(|q| {
                let rows: Vec<usize> = self.need[q]
                    .iter()
                    .copied()
                    .filter(|j| own.contains(j))
                    .collect();
                (!rows.is_empty()).then_some((q, rows))
            })
            .collect()
    }

    /// The ranks that rank `r` receives from (ascending).
    fn sources_of(&self, r: usize) -> Vec<usize> {
        let mut from: Vec<usize> = self.need[r].iter().map(|&j| self.owner(j)).collect();
        from.dedup();
        from
    }
}

/// Rank `comm.rank()`'s part of `C = A B` under `plan`: `a_local` holds its rows of A
/// (`plan.a_cuts`), `b_local` its rows of B (`plan.b_cuts`, row-major, `plan.k` wide); returns
/// its rows of C. The halo rows arrive in one exchange ([`exchange_halo`]); nothing else moves.
pub fn spmm<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &HaloPlan,
    a_local: &Csr<T>,
    b_local: &[T],
) -> Result<Vec<T>, SparseError> {
    let bx = exchange_halo(comm, plan, a_local, b_local)?;
    let local = localize(plan, comm.rank(), a_local)?;
    crate::kernels::spmm(&local, &bx, plan.k)
}

/// Sends the rows of this rank's block of B that others need and receives its own halo:
/// returns B' = its own rows, then the halo rows in `plan.need` order (the rows
/// [`localize`]'s columns refer to).
pub fn exchange_halo<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &HaloPlan,
    a_local: &Csr<T>,
    b_local: &[T],
) -> Result<Vec<T>, SparseError> {
    let (me, k) = (comm.rank(), plan.k);
    if comm.size() != plan.procs {
        return Err(SparseError::Shape(format!(
            "plan for {} ranks run on {}",
            plan.procs,
            comm.size()
        )));
    }
    let b_lo = plan.b_cuts[me];
    let own_rows = plan.b_cuts[me + 1] - b_lo;
    if a_local.nrows != plan.a_cuts[me + 1] - plan.a_cuts[me] || b_local.len() != own_rows * k {
        return Err(SparseError::Shape(format!(
            "rank {me} holds {} rows of A and {} elements of B; the plan gives it {} rows and {} x {k}",
            a_local.nrows,
            b_local.len(),
            plan.a_cuts[me + 1] - plan.a_cuts[me],
            own_rows
        )));
    }
    let sends: Vec<(usize, Vec<T>)> = plan
        .sends_of(me)
        .into_iter()
        .map(|(q, rows)| {
            let mut buf = Vec::with_capacity(rows.len() * k);
            for j in rows {
                buf.extend_from_slice(&b_local[(j - b_lo) * k..(j - b_lo + 1) * k]);
            }
            (q, buf)
        })
        .collect();
    let from = plan.sources_of(me);
    let recv = comm.exchange(sends, &from)?;
    // Owners ascending hold ascending rows, so the messages concatenate in `need` order.
    let mut bx = Vec::with_capacity((own_rows + plan.need[me].len()) * k);
    bx.extend_from_slice(b_local);
    for v in recv {
        bx.extend(v);
    }
    if bx.len() != (own_rows + plan.need[me].len()) * k {
        return Err(SparseError::Shape(format!(
            "rank {me} received {} halo elements, the plan says {}",
            bx.len() - b_local.len(),
            plan.need[me].len() * k
        )));
    }
    Ok(bx)
}

/// Rank `me`'s rows of A with columns renumbered into B' (own rows first, then the halo).
pub fn localize<T: Scalar>(
    plan: &HaloPlan,
    me: usize,
    a_local: &Csr<T>,
) -> Result<Csr<T>, SparseError> {
    let b_lo = plan.b_cuts[me];
    let own_rows = plan.b_cuts[me + 1] - b_lo;
    let need = &plan.need[me];
    let indices = a_local
        .indices
        .iter()
        .map(|&j| {
            if (b_lo..b_lo + own_rows).contains(&j) {
                Ok(j - b_lo)
            } else {
                need.binary_search(&j)
                    .map(|p| own_rows + p)
                    .map_err(|_| SparseError::Shape(format!("rank {me}: column {j} is in no halo")))
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(Csr {
        nrows: a_local.nrows,
        ncols: own_rows + need.len(),
        indptr: a_local.indptr.clone(),
        indices,
        vals: a_local.vals.clone(),
    })
}
