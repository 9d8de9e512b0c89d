//! Einsums with sparse operands from the library: [`SparseEinsum`] recognises the sparse
//! kernel an einsum is (SpMV/SpMM, SDDMM, SpGEMM, MTTKRP; see [`deinsum_sparse::einsum`]),
//! plans it from the sparse operands' pattern and runs it on any communicator or on in-process
//! ranks, in any [`Scalar`].
//!
//! ```
//! use deinsum::{Operand, SparseEinsum, SparseOptions};
//! use deinsum::sparse::SparseTensor;
//!
//! // y = A x with A the 3 x 3 identity, on 2 ranks.
//! let a = SparseTensor::from_entries(vec![3, 3], vec![0, 0, 1, 1, 2, 2], vec![1.0, 1.0, 1.0])
//!     .unwrap();
//! let x = Operand::Dense { shape: vec![3], data: vec![1.0f64, 2.0, 3.0] };
//! let spmv = SparseEinsum::compile("ij,j->i", vec![Operand::Sparse(a), x], &SparseOptions::procs(2))
//!     .unwrap();
//! assert_eq!(spmv.kernel(), "SpMV");
//! assert_eq!(spmv.run_local().unwrap().to_dense(), vec![1.0, 2.0, 3.0]);
//! ```

use crate::{Communicator, Error, InProcess, Scalar};
use deinsum_sparse::einsum::{
    run_rank, DenseOperand, Planned, RankOutcome, RunOptions, Scheme, SparseJob, SparseOutput,
    SparseReport,
};
use deinsum_sparse::{SparseError, SparseTensor};

/// An operand of [`SparseEinsum::compile`].
#[derive(Clone, Debug)]
pub enum Operand<T> {
    /// A dense operand: its shape and its values, row-major.
    Dense {
        /// Its extents.
        shape: Vec<usize>,
        /// Its values, row-major.
        data: Vec<T>,
    },
    /// A sparse operand (any order).
    Sparse(SparseTensor<T>),
}

impl<T: Scalar> Operand<T> {
    fn shape(&self) -> Vec<usize> {
        match self {
            Operand::Dense { shape, .. } => shape.clone(),
            Operand::Sparse(t) => t.shape().to_vec(),
        }
    }
}

/// Options of a sparse einsum. A sparse plan is built from the pattern alone: it has no
/// memory budget, machine model, objective or overlap (see [`crate::Options`] for dense ones).
#[derive(Clone, Copy, Debug)]
pub struct SparseOptions {
    /// Number of ranks P.
    pub procs: usize,
    /// How a square SpMV/SpMM is distributed (default: the scheme moving fewer words).
    pub scheme: Scheme,
    /// How each rank runs (threads, timed and untimed runs).
    pub run: RunOptions,
}

impl SparseOptions {
    /// Default options for `p` ranks (one thread each, one run).
    pub fn procs(p: usize) -> Self {
        SparseOptions {
            procs: p,
            scheme: Scheme::Auto,
            run: RunOptions::default(),
        }
    }
}

/// A compiled einsum with sparse operands: the job (operands and kernel) and its plan.
#[derive(Clone, Debug)]
pub struct SparseEinsum<T> {
    job: SparseJob<T>,
    plan: Planned,
    options: SparseOptions,
}

impl<T: Scalar> SparseEinsum<T> {
    /// Parses `expr` with the operands' shapes as extents, recognises its sparse kernel from
    /// which operands are [`Operand::Sparse`] and plans it for `options.procs` ranks. An
    /// einsum whose form is not built is refused ([`SparseError::NotBuilt`]).
    pub fn compile(
        expr: &str,
        operands: Vec<Operand<T>>,
        options: &SparseOptions,
    ) -> Result<Self, Error> {
        let spec = deinsum_expr::ExtentSpec {
            shapes: Some(operands.iter().map(Operand::shape).collect()),
            ..deinsum_expr::ExtentSpec::default()
        };
        let einsum = deinsum_expr::parse(expr, &spec)?;
        let mut sparse_ops = Vec::new();
        let mut sparse = Vec::new();
        let mut dense = Vec::new();
        for (k, op) in operands.into_iter().enumerate() {
            match op {
                Operand::Sparse(t) => {
                    sparse_ops.push(k);
                    sparse.push(t);
                    dense.push(None);
                }
                Operand::Dense { data, .. } => dense.push(Some(data)),
            }
        }
        let job = SparseJob::new(
            einsum,
            &sparse_ops,
            sparse,
            |k| DenseOperand::Given(dense[k].take().unwrap_or_default()),
            options.scheme,
        )?;
        Self::from_job(job, options)
    }

    /// Plans an existing job (operands read from files or generated, as `deinsum run` does).
    pub fn from_job(job: SparseJob<T>, options: &SparseOptions) -> Result<Self, Error> {
        if options.procs == 0 {
            return Err(SparseError::Usage("the number of ranks must be at least 1".into()).into());
        }
        let plan = job.plan(options.procs)?;
        Ok(SparseEinsum {
            job,
            plan,
            options: *options,
        })
    }

    /// The kernel's name (`SpMV`, `SpMM`, `SDDMM`, `SpGEMM`, `MTTKRP`).
    pub fn kernel(&self) -> &'static str {
        self.job.form().name()
    }

    /// The job: the kernel and its operands.
    pub fn job(&self) -> &SparseJob<T> {
        &self.job
    }

    /// The plan (its predicted words per rank through [`Planned::plan`]).
    pub fn plan(&self) -> &Planned {
        &self.plan
    }

    /// Runs this rank's part on `comm` (every rank of a world of `procs` calls it) and returns
    /// its outcome; [`deinsum_sparse::einsum::gather_outcomes`] then [`SparseReport::new`]
    /// assemble the whole on rank 0.
    pub fn run<C: Communicator>(&self, comm: &C) -> Result<RankOutcome<T>, Error> {
        if comm.size() != self.options.procs {
            return Err(SparseError::Usage(format!(
                "the plan is for {} ranks, the communicator has {}",
                self.options.procs,
                comm.size()
            ))
            .into());
        }
        Ok(run_rank(comm, &self.job, &self.plan, &self.options.run)?)
    }

    /// Runs on `procs` in-process ranks and returns the report: predicted against measured
    /// bytes, imbalance, costs, timings and the whole result.
    pub fn run_local_report(&self) -> Result<SparseReport<T>, Error> {
        let procs = self.options.procs;
        deinsum_exec::preflight::check_in_process_ranks(procs)?;
        let world = InProcess::new(procs).map_err(|e| Error::Exec(e.into()))?;
        let outs = world
            .run(|comm| run_rank(comm, &self.job, &self.plan, &self.options.run))
            .map_err(|e| Error::Rank(e.to_string()))?;
        Ok(SparseReport::new(&self.job, &self.plan, outs)?)
    }

    /// Runs on `procs` in-process ranks and returns the result: dense, or sparse (SDDMM in
    /// its operand's pattern, SpGEMM).
    pub fn run_local(&self) -> Result<SparseOutput<T>, Error> {
        Ok(self.run_local_report()?.output)
    }
}
