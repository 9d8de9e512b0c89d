//! The distributed SpMM `C = A B` (`ij,jk->ik`, A sparse, B and C dense; SpMV for k = 1) and
//! SDDMM (`ij,ik,jk->ij`, whose dense V is fetched as B is),
//! planned from A's pattern (seed 003's ghost exchange):
//!
//! - A's rows (and C's) are cut into P contiguous parts balanced by nonzeros, not by rows;
//! - B's rows are cut the same way when A is square (the vector follows the matrix's rows),
//!   else into P balanced blocks;
//! - the inspector reads the pattern: rank r needs the rows of B that its nonzeros touch and it
//!   does not own, and receives exactly those from their owners, so the predicted words are
//!   exact (the communicator's count is held against them in the tests), beside what
//!   replicating B (an all-gather) would move.

use crate::fetch::{self, RowFetch};
use crate::{Csr, SparseError};
use deinsum_exec::{Communicator, Scalar};

pub use crate::fetch::balance_rows;

/// The plan of one distributed SpMM (or SDDMM, whose dense operand V is fetched the same
/// way): the row parts of A, and the fetch of B's rows. Size O(P + halo rows).
#[derive(Clone, Debug, PartialEq)]
pub struct HaloPlan {
    /// Number of ranks.
    pub procs: usize,
    /// Columns of B and C.
    pub k: usize,
    /// Rank r holds rows `a_cuts[r]..a_cuts[r + 1]` of A and C.
    pub a_cuts: Vec<usize>,
    /// Nonzeros of A per rank.
    pub nnz: Vec<usize>,
    /// B's rows: who owns which (`fetch.cuts`), who receives which (`fetch.need`).
    pub fetch: RowFetch,
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
            fetch::even_cuts(a.ncols, procs)
        };
        let fetch = RowFetch::build(a.ncols, k, b_cuts, |r| {
            a.indices[a.indptr[a_cuts[r]]..a.indptr[a_cuts[r + 1]]]
                .iter()
                .copied()
        })?;
        let nnz = (0..procs)
            .map(|r| a.indptr[a_cuts[r + 1]] - a.indptr[a_cuts[r]])
            .collect();
        Ok(HaloPlan {
            procs,
            k,
            a_cuts,
            nnz,
            fetch,
        })
    }

    /// Rank r holds rows `b_cuts()[r]..b_cuts()[r + 1]` of B.
    pub fn b_cuts(&self) -> &[usize] {
        &self.fetch.cuts
    }

    /// Words rank `r` receives: its halo rows times k.
    pub fn received_words(&self, r: usize) -> u64 {
        self.fetch.received_words(r)
    }

    /// Words rank `r` sends: the rows of its block that other ranks need, times k.
    pub fn sent_words(&self, r: usize) -> u64 {
        self.fetch.sent_words(r)
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
        self.fetch.replication_words(r)
    }

    /// Max nonzeros per rank over the mean (1 is perfect balance).
    pub fn imbalance(&self) -> f64 {
        fetch::imbalance(&self.nnz)
    }
}

/// Rank `comm.rank()`'s part of `C = A B` under `plan`: `a_local` holds its rows of A
/// (`plan.a_cuts`), `b_local` its rows of B (`plan.b_cuts()`, row-major, `plan.k` wide);
/// returns its rows of C. The halo rows arrive in one exchange ([`exchange_halo`]); nothing
/// else moves.
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

/// Rank `comm.rank()`'s part of the SDDMM `C_ij = S_ij sum_r U_ir V_jr` (`ij,ir,jr->ij`,
/// the output sparse in S's pattern) under `plan` (built from S with `k = r`): `s_local` its
/// rows of S, `u_local` the same rows of U (`r` wide), `v_local` its rows of V
/// (`plan.b_cuts()`); returns the values of its entries of C, in S's entry order. Only V's
/// halo rows move.
pub fn sddmm<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &HaloPlan,
    s_local: &Csr<T>,
    u_local: &[T],
    v_local: &[T],
) -> Result<Vec<T>, SparseError> {
    let vx = exchange_halo(comm, plan, s_local, v_local)?;
    let local = localize(plan, comm.rank(), s_local)?;
    crate::kernels::sddmm(&local, u_local, &vx, plan.k)
}

/// Sends the rows of this rank's block of B that others need and receives its own halo:
/// returns B' = its own rows, then the halo rows in `need` order (the rows [`localize`]'s
/// columns refer to).
pub fn exchange_halo<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &HaloPlan,
    a_local: &Csr<T>,
    b_local: &[T],
) -> Result<Vec<T>, SparseError> {
    let me = comm.rank();
    if me < plan.procs && a_local.nrows != plan.a_cuts[me + 1] - plan.a_cuts[me] {
        return Err(SparseError::Shape(format!(
            "rank {me} holds {} rows of A; the plan gives it {}",
            a_local.nrows,
            plan.a_cuts[me + 1] - plan.a_cuts[me]
        )));
    }
    plan.fetch.exchange(comm, b_local)
}

/// Rank `me`'s rows of A with columns renumbered into B' (own rows first, then the halo).
pub fn localize<T: Scalar>(
    plan: &HaloPlan,
    me: usize,
    a_local: &Csr<T>,
) -> Result<Csr<T>, SparseError> {
    plan.fetch.localize(me, a_local)
}
