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
/// returns its rows of C. The halo rows arrive in one exchange, overlapped with the product
/// of the columns the rank owns ([`spmm_local`]); nothing else moves.
pub fn spmm<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &HaloPlan,
    a_local: &Csr<T>,
    b_local: &[T],
) -> Result<Vec<T>, SparseError> {
    let local = LocalRows::build(plan, comm.rank(), a_local)?;
    spmm_local(comm, plan, &local, b_local, None)
}

/// A column part of a rank's rows: 4-byte columns when its column count fits, else 8.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Part<T> {
    Narrow(Csr<T, u32>),
    Wide(Csr<T>),
}

impl<T: Scalar> Part<T> {
    pub(crate) fn of(csr: Csr<T>) -> Part<T> {
        csr.narrow().map_or(Part::Wide(csr), Part::Narrow)
    }

    pub(crate) fn spmm_into(
        &self,
        b: &[T],
        k: usize,
        c: &mut [T],
        add: bool,
    ) -> Result<(), SparseError> {
        match self {
            Part::Narrow(a) => crate::kernels::spmm_into(a, b, k, c, add),
            Part::Wide(a) => crate::kernels::spmm_into(a, b, k, c, add),
        }
    }

    /// [`crate::kernels::spmm`]: `A B` into a new vector.
    pub(crate) fn spmm(&self, b: &[T], k: usize) -> Result<Vec<T>, SparseError> {
        match self {
            Part::Narrow(a) => crate::kernels::spmm(a, b, k),
            Part::Wide(a) => crate::kernels::spmm(a, b, k),
        }
    }

    pub(crate) fn nnz(&self) -> usize {
        match self {
            Part::Narrow(a) => a.nnz(),
            Part::Wide(a) => a.nnz(),
        }
    }
}

/// A rank's rows of A as the distributed SpMM reads them (the inspector's local part, built
/// once before any run): split into the entries whose columns are in the rank's own block of
/// B (numbered within the block) and those in its halo (numbered in `need` order), so the
/// first part runs while the halo is in flight, on B's block as it is (no copy into a B').
#[derive(Clone, Debug, PartialEq)]
pub struct LocalRows<T> {
    rank: usize,
    rows: usize,
    own: Part<T>,
    halo: Part<T>,
}

impl<T: Scalar> LocalRows<T> {
    /// Splits rank `me`'s rows of A (`a_local`, columns global) under `plan`.
    pub fn build(plan: &HaloPlan, me: usize, a_local: &Csr<T>) -> Result<Self, SparseError> {
        check_rows(plan, me, a_local)?;
        let f = &plan.fetch;
        let (lo, hi) = (f.cuts[me], f.cuts[me + 1]);
        let empty = |ncols| Csr {
            nrows: a_local.nrows,
            ncols,
            indptr: vec![0],
            indices: Vec::new(),
            vals: Vec::new(),
        };
        let (mut own, mut halo) = (empty(hi - lo), empty(f.need[me].len()));
        for i in 0..a_local.nrows {
            for p in a_local.indptr[i]..a_local.indptr[i + 1] {
                let (j, v) = (a_local.indices[p], a_local.vals[p]);
                if (lo..hi).contains(&j) {
                    own.indices.push(j - lo);
                    own.vals.push(v);
                } else {
                    let at = f.need[me].binary_search(&j).map_err(|_| {
                        SparseError::Shape(format!("rank {me}: column {j} is in no halo"))
                    })?;
                    halo.indices.push(at);
                    halo.vals.push(v);
                }
            }
            own.indptr.push(own.indices.len());
            halo.indptr.push(halo.indices.len());
        }
        Ok(LocalRows {
            rank: me,
            rows: a_local.nrows,
            own: Part::of(own),
            halo: Part::of(halo),
        })
    }

    /// Nonzeros whose columns the rank owns, and those in its halo.
    pub fn nnz_split(&self) -> (usize, usize) {
        (self.own.nnz(), self.halo.nnz())
    }
}

/// Rank `comm.rank()`'s rows of `C = A B` from its prepared rows ([`LocalRows::build`]) and
/// its block of B: sends the rows of its block others need, multiplies its own columns while
/// its halo is in flight, then adds the halo columns' part. The kernels run on `pool` (the
/// calling pool when `None`); the communication stays on the calling thread.
pub fn spmm_local<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &HaloPlan,
    local: &LocalRows<T>,
    b_local: &[T],
    pool: Option<&rayon::ThreadPool>,
) -> Result<Vec<T>, SparseError> {
    let me = comm.rank();
    if local.rank != me {
        return Err(SparseError::Shape(format!(
            "rows prepared for rank {} used on rank {me}",
            local.rank
        )));
    }
    let k = plan.k;
    let (halo, c) = plan.fetch.exchange_while(comm, b_local, || {
        install(pool, || local.own.spmm(b_local, k))
    })?;
    let mut c = c?;
    if local.halo.nnz() > 0 {
        install(pool, || local.halo.spmm_into(&halo, k, &mut c, true))?;
    }
    Ok(c)
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
    check_rows(plan, comm.rank(), a_local)?;
    plan.fetch.exchange(comm, b_local)
}

/// Runs `f` on `pool`, or on the calling thread's pool when `None`.
pub(crate) fn install<R: Send>(
    pool: Option<&rayon::ThreadPool>,
    f: impl FnOnce() -> R + Send,
) -> R {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

fn check_rows<T>(plan: &HaloPlan, me: usize, a_local: &Csr<T>) -> Result<(), SparseError> {
    if me >= plan.procs {
        return Err(SparseError::Shape(format!(
            "rank {me} in a plan for {} ranks",
            plan.procs
        )));
    }
    if a_local.nrows != plan.a_cuts[me + 1] - plan.a_cuts[me] {
        return Err(SparseError::Shape(format!(
            "rank {me} holds {} rows of A; the plan gives it {}",
            a_local.nrows,
            plan.a_cuts[me + 1] - plan.a_cuts[me]
        )));
    }
    Ok(())
}

/// Rank `me`'s rows of A with columns renumbered into B' (own rows first, then the halo).
pub fn localize<T: Scalar>(
    plan: &HaloPlan,
    me: usize,
    a_local: &Csr<T>,
) -> Result<Csr<T>, SparseError> {
    plan.fetch.localize(me, a_local)
}
