//! Distributed SpGEMM and sparse MTTKRP, planned from the pattern (the SpMM and SDDMM plans
//! are in [`crate::halo`]):
//!
//! - SpGEMM `ij,jk->ik` (A and B sparse, C sparse): A's rows (and C's) are cut into contiguous
//!   parts balanced by multiply-adds (the nonzeros of B each row of A reaches: what Gustavson's
//!   kernel does), B's rows like A's when A is square, else balanced by B's nonzeros; each rank
//!   receives exactly the rows of B its columns touch (lengths, columns and values);
//! - MTTKRP (`ijk,ja,ka->ia` and every other mode and order): the tensor is cut along the
//!   output mode at nnz-balanced cut points, so each rank owns whole output rows and nothing is
//!   reduced; each other mode's factor is cut at that mode's own nnz-balanced points (where its
//!   MTTKRP would produce it, as in CP-ALS), and each rank receives exactly the factor rows its
//!   nonzeros touch.
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

/// The plan of one distributed sparse MTTKRP in mode `mode`. Size O(P × order + halo rows).
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
    /// Per mode, its nnz-balanced cut points: the tensor's (and M's) rows for the output mode,
    /// the factor's rows for the others.
    pub cuts: Vec<Vec<usize>>,
    /// Nonzeros per rank.
    pub nnz: Vec<usize>,
    /// Per mode, the factor's fetch (the output mode's fetches nothing).
    pub fetch: Vec<RowFetch>,
}

impl MttkrpPlan {
    /// Plans the MTTKRP of `x` in `mode` with `r`-column factors on `procs` ranks.
    pub fn build<T: Scalar>(
        x: &SparseTensor<T>,
        mode: usize,
        r: usize,
        procs: usize,
    ) -> Result<MttkrpPlan, SparseError> {
        no_ranks(procs)?;
        let order = x.order();
        if mode >= order {
            return Err(SparseError::Shape(format!(
                "mode {mode} of an order-{order} tensor"
            )));
        }
        let shape = x.shape().to_vec();
        let cuts: Vec<Vec<usize>> = (0..order)
            .map(|m| {
                let mut prefix = vec![0usize; shape[m] + 1];
                for e in 0..x.nnz() {
                    prefix[x.coord(e)[m] + 1] += 1;
                }
                for i in 0..shape[m] {
                    prefix[i + 1] += prefix[i];
                }
                fetch::balance_rows(&prefix, procs)
            })
            .collect();
        // The entries of each rank, by a counting sort on the owner of their output row.
        let out_cuts = &cuts[mode];
        let owner = |e: usize| out_cuts.partition_point(|&c| c <= x.coord(e)[mode]) - 1;
        let mut start = vec![0usize; procs + 1];
        let owners: Vec<usize> = (0..x.nnz()).map(owner).collect();
        for &o in &owners {
            start[o + 1] += 1;
        }
        for q in 0..procs {
            start[q + 1] += start[q];
        }
        let mut next = start.clone();
        let mut entries = vec![0usize; x.nnz()];
        for (e, &o) in owners.iter().enumerate() {
            entries[next[o]] = e;
            next[o] += 1;
        }
        let nnz = (0..procs).map(|q| start[q + 1] - start[q]).collect();
        let fetch = (0..order)
            .map(|m| {
                let ents = |q: usize| {
                    let list = if m == mode {
                        &entries[0..0]
                    } else {
                        &entries[start[q]..start[q + 1]]
                    };
                    list.iter().map(move |&e| x.coord(e)[m])
                };
                RowFetch::build(shape[m], r, cuts[m].clone(), ents)
            })
            .collect::<Result<_, _>>()?;
        Ok(MttkrpPlan {
            procs,
            mode,
            r,
            shape,
            cuts,
            nnz,
            fetch,
        })
    }

    /// Words rank `q` receives: the factor rows its nonzeros touch and it does not hold.
    pub fn received_words(&self, q: usize) -> u64 {
        self.fetch.iter().map(|f| f.received_words(q)).sum()
    }

    /// Words rank `q` sends.
    pub fn sent_words(&self, q: usize) -> u64 {
        self.fetch.iter().map(|f| f.sent_words(q)).sum()
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

    /// Rank `me`'s nonzeros of `x` (the whole tensor the plan was built from), grouped by
    /// their output row with the other modes' coordinates renumbered into the fetched factors
    /// (own rows, then halo rows): the inspector's local part, built once before any run.
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
        let (lo, hi) = (self.cuts[self.mode][me], self.cuts[self.mode][me + 1]);
        let maps: Vec<Vec<usize>> = (0..self.shape.len())
            .map(|m| {
                if m == self.mode {
                    Vec::new()
                } else {
                    self.fetch[m].local_map(me)
                }
            })
            .collect();
        let g = ModeGroups::build(
            x,
            self.mode,
            hi - lo,
            |i| (lo..hi).contains(&i).then(|| i - lo),
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

/// Rank `comm.rank()`'s rows of the MTTKRP under `plan`: `local` its nonzeros
/// ([`MttkrpPlan::local_part`]), `factors_local[m]` its rows of mode m's factor
/// (`plan.cuts[m]`, `plan.r` wide; the output mode's entry is not read). Each other factor's
/// halo arrives in one exchange ([`fetch_factors`]); the rows are split over the calling
/// rayon pool.
pub fn mttkrp<T: Scalar, C: Communicator>(
    comm: &C,
    plan: &MttkrpPlan,
    local: &ModeGroups<T>,
    factors_local: &[&[T]],
) -> Result<Vec<T>, SparseError> {
    let fetched = fetch_factors(comm, plan, factors_local)?;
    let views: Vec<&[T]> = fetched.iter().map(Vec::as_slice).collect();
    kernels::mttkrp_grouped(local, &views, plan.r)
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
