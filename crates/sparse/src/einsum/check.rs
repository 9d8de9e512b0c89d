//! The check of a sparse einsum's result against a serial reference.

use super::{Form, SparseJob, SparseOutput};
use crate::{kernels, Csr, SparseError, SparseTensor};
use deinsum_exec::Scalar;

/// The dense reference evaluates the einsum naively when its iteration space has at most
/// this many points; above, the serial sparse kernel is the reference.
pub const DENSE_CHECK_POINTS: f64 = 2e7;

/// What a result was checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckReference {
    /// The dense serial einsum, the sparse operands densified.
    Dense,
    /// The serial sparse kernel (the dense reference being too large).
    SerialSparse,
}

impl CheckReference {
    /// The reference in words.
    pub fn describe(self) -> &'static str {
        match self {
            CheckReference::Dense => "the dense serial einsum (sparse operands densified)",
            CheckReference::SerialSparse => {
                "the serial sparse kernel (the dense reference is too large)"
            }
        }
    }
}

/// A result against its reference.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    /// Max absolute error (infinite when the patterns differ).
    pub max_abs: f64,
    /// Max error relative to the reference's largest magnitude.
    pub max_rel: f64,
    /// The reference.
    pub reference: CheckReference,
}

impl Check {
    /// Compares `output` with the serial reference of `job` (patterns must agree exactly).
    pub fn of<T: Scalar>(
        job: &SparseJob<T>,
        output: &SparseOutput<T>,
    ) -> Result<Self, SparseError> {
        let got = compared_form(job, output);
        let (want, reference) = reference(job)?;
        let same_pattern = match job.form() {
            Form::Spgemm => {
                got.len() == want.len()
                    && got
                        .chunks(3)
                        .zip(want.chunks(3))
                        .all(|(g, w)| g[0] == w[0] && g[1] == w[1])
            }
            _ => got.len() == want.len(),
        };
        let (max_abs, max_rel) = if same_pattern {
            deinsum_exec::reference::max_error(&got, &want)
        } else {
            (f64::INFINITY, f64::INFINITY)
        };
        Ok(Check {
            max_abs,
            max_rel,
            reference,
        })
    }
}

/// The output in the form the check compares: dense for SpMM and MTTKRP, the values at the
/// pattern for SDDMM, (row, column, value) triples in row-major order for SpGEMM.
fn compared_form<T: Scalar>(job: &SparseJob<T>, output: &SparseOutput<T>) -> Vec<f64> {
    match (job.form(), output) {
        (Form::Spgemm, SparseOutput::Sparse(t)) => (0..t.nnz())
            .flat_map(|e| {
                let c = t.coord(e);
                [c[0] as f64, c[1] as f64, t.values()[e].to_f64()]
            })
            .collect(),
        (_, SparseOutput::Sparse(t)) => t.values().iter().map(|v| v.to_f64()).collect(),
        (_, SparseOutput::Dense { data, .. }) => data.iter().map(|v| v.to_f64()).collect(),
    }
}

/// SpGEMM's entries as (row, column, value) triples, the value `val(row, column)`.
fn triples<T: Scalar>(c: &Csr<T>, val: impl Fn(usize, usize, usize) -> f64) -> Vec<f64> {
    let mut t = Vec::with_capacity(3 * c.nnz());
    for i in 0..c.nrows {
        for q in c.indptr[i]..c.indptr[i + 1] {
            t.extend([i as f64, c.indices[q] as f64, val(i, c.indices[q], q)]);
        }
    }
    t
}

/// The serial reference of `job` in the compared form, and what it is: the naive dense
/// einsum up to [`DENSE_CHECK_POINTS`], else the serial sparse kernel.
pub fn reference<T: Scalar>(job: &SparseJob<T>) -> Result<(Vec<f64>, CheckReference), SparseError> {
    let einsum = job.einsum();
    if deinsum_exec::reference::iteration_space(einsum) <= DENSE_CHECK_POINTS {
        let dense: Vec<Vec<T>> = job.sparse().iter().map(SparseTensor::to_dense).collect();
        let sparse_k = job.form().sparse_operands();
        let full = deinsum_exec::reference::naive(einsum, &|k, x| match sparse_k
            .iter()
            .position(|&s| s == k)
        {
            Some(p) => dense[p][x as usize].to_f64(),
            None => job.dense_value(k, x),
        });
        let out = match job.form() {
            Form::Sddmm { j, .. } => {
                let s = &job.sparse()[0];
                let n = job.ext(*j);
                (0..s.nnz())
                    .map(|e| full[s.coord(e)[0] * n + s.coord(e)[1]])
                    .collect()
            }
            // The serial product's pattern, its values read from the dense result.
            Form::Spgemm => {
                let c = kernels::spgemm(job.csr(0)?, job.csr(1)?)?;
                triples(&c, |i, col, _| full[i * c.ncols + col])
            }
            _ => full,
        };
        return Ok((out, CheckReference::Dense));
    }
    Ok((serial_sparse(job)?, CheckReference::SerialSparse))
}

/// The serial sparse kernel's result in the compared form.
fn serial_sparse<T: Scalar>(job: &SparseJob<T>) -> Result<Vec<f64>, SparseError> {
    let gen = |k: usize, n: usize| -> Vec<T> { job.dense_rows(k, 0, n, 1) };
    let f64s = |v: Vec<T>| v.into_iter().map(T::to_f64).collect();
    Ok(match job.form() {
        Form::Spmm { j, rest, .. } => {
            let w = job.width(rest);
            f64s(kernels::spmm(job.csr(0)?, &gen(1, job.ext(*j) * w), w)?)
        }
        Form::Sddmm { i, j, rest } => {
            let w = job.width(rest);
            let (u, v) = (gen(1, job.ext(*i) * w), gen(2, job.ext(*j) * w));
            f64s(kernels::sddmm(job.csr(0)?, &u, &v, w)?)
        }
        Form::Spgemm => {
            let c = kernels::spgemm(job.csr(0)?, job.csr(1)?)?;
            triples(&c, |_, _, q| c.vals[q].to_f64())
        }
        Form::Mttkrp {
            modes,
            a,
            mode,
            factor,
        } => {
            let r = job.ext(*a);
            let fs: Vec<Vec<T>> = factor
                .iter()
                .enumerate()
                .map(|(m, op)| op.map_or(Vec::new(), |k| gen(k, job.ext(modes[m]) * r)))
                .collect();
            let views: Vec<&[T]> = fs.iter().map(Vec::as_slice).collect();
            f64s(kernels::mttkrp(&job.sparse()[0], &views, *mode, r)?)
        }
    })
}
