//! Sparse einsums as a library: recognise the kernel an einsum with sparse operands is
//! ([`Form`]), plan it from the pattern ([`SparseJob::plan`], one of the four plan kinds behind
//! [`SparsePlan`]), run it on every rank of any communicator in any [`Scalar`]
//! ([`run_rank`]), and report predicted against measured words, imbalance, costs counted from
//! the nonzeros and timings ([`SparseReport`]), with the result ([`SparseOutput`]).
//!
//! The built forms: SpMM `ij,jk->ik` / SpMV `ij,j->i` and SDDMM `ij,ik,jk->ij` (operand 0
//! sparse) on the row cut's halo ([`crate::halo`]) or, for a square SpMV/SpMM, the fine-grain
//! scheme ([`crate::fine`]); SpGEMM `ij,jk->ik` (operands 0 and 1 sparse) and MTTKRP
//! `ijk,ja,ka->ia` in any mode and order (operand 0 sparse) ([`crate::dist`]).

mod check;
mod form;
mod output;
mod plans;
mod run;

pub use check::{reference, Check, CheckReference, Compared};
pub use form::{Form, BUILT};
pub use output::{check_output_file, write_output};
pub use plans::{Planned, Scheme, SchemeChoice, SparsePlan};
pub use run::{gather_outcomes, run_rank, RankOutcome, RunOptions, SparseOutput, SparseReport};

use crate::dist::{MttkrpPlan, SpgemmPlan};
use crate::fine::FinePlan;
use crate::halo::HaloPlan;
use crate::{Csr, SparseError, SparseTensor};
use deinsum_exec::data::seeded;
use deinsum_exec::Scalar;
use deinsum_expr::{Index, ParsedEinsum};

/// A dense operand of a sparse einsum.
#[derive(Clone, Debug)]
pub enum DenseOperand<T> {
    /// Its values, row-major over its indices.
    Given(Vec<T>),
    /// Generated from the seed as a dense run of the same einsum and seed would
    /// ([`deinsum_exec::data::seeded`]: rounded to `T`, with imaginary parts for a complex `T`).
    Seeded(u64),
}

/// The data of a sparse einsum: its form, its sparse operands (in CSR too where they are
/// matrices, converted once and shared by in-process ranks), its dense operands, and the
/// SpMV/SpMM scheme.
#[derive(Clone, Debug)]
pub struct SparseJob<T> {
    form: Form,
    einsum: ParsedEinsum,
    sparse: Vec<SparseTensor<T>>,
    csr: Vec<Option<Csr<T>>>,
    /// Per operand (sparse ones `None`).
    dense: Vec<Option<DenseOperand<T>>>,
    scheme: Scheme,
}

impl<T: Scalar> SparseJob<T> {
    /// The job of `einsum` whose operands `sparse_ops` (sorted) are the tensors `sparse`, in
    /// that order; every other operand `k` is `dense(k)`. Refuses a form that is not built
    /// ([`SparseError::NotBuilt`]), a sparse operand whose shape is not its extents, and a
    /// given dense operand of the wrong length.
    pub fn new(
        einsum: ParsedEinsum,
        sparse_ops: &[usize],
        sparse: Vec<SparseTensor<T>>,
        mut dense: impl FnMut(usize) -> DenseOperand<T>,
        scheme: Scheme,
    ) -> Result<Self, SparseError> {
        let form = Form::of(&einsum, sparse_ops)?;
        let shape_of = |k: usize| -> Vec<usize> {
            einsum.inputs()[k]
                .indices
                .iter()
                .map(|&c| einsum.extent(c))
                .collect()
        };
        if sparse.len() != sparse_ops.len() {
            return Err(SparseError::Shape(format!(
                "{} sparse tensors for the sparse operands {sparse_ops:?}",
                sparse.len()
            )));
        }
        for (t, &k) in sparse.iter().zip(sparse_ops) {
            if t.shape() != shape_of(k) {
                return Err(SparseError::Shape(format!(
                    "sparse operand {k} has shape {:?}, the einsum gives it {:?}",
                    t.shape(),
                    shape_of(k)
                )));
            }
        }
        let mut dense_ops = vec![None; einsum.num_inputs()];
        for (k, slot) in dense_ops.iter_mut().enumerate() {
            if sparse_ops.contains(&k) {
                continue;
            }
            let d = dense(k);
            let len: usize = shape_of(k).iter().product();
            if let DenseOperand::Given(v) = &d {
                if v.len() != len {
                    return Err(SparseError::Shape(format!(
                        "dense operand {k} has {} values, its shape {:?} holds {len}",
                        v.len(),
                        shape_of(k)
                    )));
                }
            }
            *slot = Some(d);
        }
        let csr = sparse
            .iter()
            .map(|t| (t.order() == 2).then(|| t.to_csr()).transpose())
            .collect::<Result<_, _>>()?;
        Ok(SparseJob {
            form,
            einsum,
            sparse,
            csr,
            dense: dense_ops,
            scheme,
        })
    }

    /// The kernel.
    pub fn form(&self) -> &Form {
        &self.form
    }

    /// The einsum with its extents.
    pub fn einsum(&self) -> &ParsedEinsum {
        &self.einsum
    }

    /// The sparse operands, in operand order ([`Form::sparse_operands`]).
    pub fn sparse(&self) -> &[SparseTensor<T>] {
        &self.sparse
    }

    /// Extent of index `c`.
    pub fn ext(&self, c: Index) -> usize {
        self.einsum.extent(c)
    }

    /// Width of the dense operands' rows (the product of the extents of `rest`).
    pub fn width(&self, rest: &[Index]) -> usize {
        rest.iter().map(|&c| self.ext(c)).product()
    }

    /// The result's extents.
    pub fn output_shape(&self) -> Vec<usize> {
        self.einsum.output().iter().map(|&c| self.ext(c)).collect()
    }

    /// Sparse operand `k` (0 or 1) in CSR.
    fn csr(&self, k: usize) -> Result<&Csr<T>, SparseError> {
        self.csr
            .get(k)
            .and_then(Option::as_ref)
            .ok_or_else(|| SparseError::Shape(format!("operand {k} is not a sparse matrix")))
    }

    /// Plans the job for `procs` ranks. A scheme other than [`Scheme::Auto`] is refused unless
    /// the job is SpMV/SpMM with a square sparse matrix.
    pub fn plan(&self, procs: usize) -> Result<Planned, SparseError> {
        let square = self.csr[0].as_ref().is_some_and(|a| a.nrows == a.ncols);
        if self.scheme != Scheme::Auto && !(matches!(self.form, Form::Spmm { .. }) && square) {
            return Err(SparseError::Usage(
                "--spmv-scheme applies to SpMV ij,j->i and SpMM ij,jk->ik with a square sparse matrix"
                    .into(),
            ));
        }
        Ok(match &self.form {
            Form::Spmm { rest, .. } if square => self.square_spmm(self.width(rest), procs)?,
            Form::Spmm { rest, .. } | Form::Sddmm { rest, .. } => Planned::Halo(
                HaloPlan::build(self.csr(0)?, self.width(rest), procs)?,
                None,
            ),
            Form::Spgemm => Planned::Spgemm(SpgemmPlan::build(self.csr(0)?, self.csr(1)?, procs)?),
            Form::Mttkrp { mode, a, .. } => Planned::Mttkrp(MttkrpPlan::build(
                &self.sparse[0],
                *mode,
                self.ext(*a),
                procs,
            )?),
        })
    }

    /// The row cut or the fine-grain scheme of a square SpMV/SpMM, as the scheme says.
    fn square_spmm(&self, k: usize, procs: usize) -> Result<Planned, SparseError> {
        let a = self.csr(0)?;
        let rows = HaloPlan::build(a, k, procs)?;
        let fine = FinePlan::build(a, k, procs)?;
        let (by, use_fine) = match self.scheme {
            Scheme::Auto => (
                "--spmv-scheme auto: the fewer words in all (rows on a tie)",
                fine.total_received() < rows.total_received(),
            ),
            Scheme::Rows => ("--spmv-scheme rows", false),
            Scheme::Fine => ("--spmv-scheme fine", true),
        };
        let choice = SchemeChoice {
            rows: (rows.total_received(), rows.max_received(), rows.imbalance()),
            fine: (fine.total_received(), fine.max_received(), fine.imbalance()),
            by,
        };
        Ok(if use_fine {
            Planned::Fine(fine, choice)
        } else {
            Planned::Halo(rows, Some(choice))
        })
    }

    /// Rows `lo..hi` of dense operand `k` (its first index cut into rows of `width`).
    pub fn dense_rows(&self, k: usize, lo: usize, hi: usize, width: usize) -> Vec<T> {
        match self.dense.get(k) {
            Some(Some(DenseOperand::Given(d))) => d[lo * width..hi * width].to_vec(),
            Some(Some(DenseOperand::Seeded(seed))) => (lo * width..hi * width)
                .map(|x| seeded::<T>(*seed, k, x as u64))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Element `x` (row-major storage index) of dense operand `k` (zero for a sparse one).
    pub fn dense_value(&self, k: usize, x: u64) -> T {
        match self.dense.get(k) {
            Some(Some(DenseOperand::Given(d))) => d[x as usize],
            Some(Some(DenseOperand::Seeded(seed))) => seeded::<T>(*seed, k, x),
            _ => T::default(),
        }
    }

    /// Multiply-adds (terms) counted from the nonzeros: nonzeros times the extents of the
    /// indices outside the sparse operand (SpGEMM: per nonzero of A, the nonzeros of its row
    /// of B); per rank, and the dense evaluation's for comparison.
    pub fn terms(&self, plan: &Planned) -> (Vec<u64>, f64) {
        let dense = deinsum_exec::reference::iteration_space(&self.einsum);
        let nnz = plan.plan().nnz();
        let per_rank = match (plan, &self.form) {
            (Planned::Spgemm(p), _) => p.madds.iter().map(|&m| m as u64).collect(),
            (_, Form::Mttkrp { a, .. }) => nnz.iter().map(|&n| (n * self.ext(*a)) as u64).collect(),
            (_, Form::Spmm { rest, .. } | Form::Sddmm { rest, .. }) => {
                let w = self.width(rest);
                nnz.iter().map(|&n| (n * w) as u64).collect()
            }
            _ => Vec::new(),
        };
        (per_rank, dense)
    }
}
