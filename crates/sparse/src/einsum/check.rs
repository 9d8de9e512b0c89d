//! The check of a sparse einsum's result against a serial reference, in complex f64 so that a
//! complex result's imaginary parts are compared too (a real one's are zero on both sides).

use super::{Form, SparseJob, SparseOutput};
use crate::{kernels, Csr, SparseError, SparseTensor};
use deinsum_exec::scalar::Complex64;
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
        let same_pattern = got.coords == want.coords && got.values.len() == want.values.len();
        let (max_abs, max_rel) = if same_pattern {
            deinsum_exec::reference::max_error(&got.values, &want.values)
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

/// A result in the form the check compares: its values widened to complex f64 (a real value's
/// imaginary part 0) and, for SpGEMM, each value's (row, column), row-major.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Compared {
    /// SpGEMM: (row, column) of each value; empty for the other kernels.
    pub coords: Vec<usize>,
    /// The values: dense for SpMM and MTTKRP, at the pattern for SDDMM, SpGEMM's entries.
    pub values: Vec<Complex64>,
}

/// The output in the form the check compares.
fn compared_form<T: Scalar>(job: &SparseJob<T>, output: &SparseOutput<T>) -> Compared {
    match (job.form(), output) {
        (Form::Spgemm, SparseOutput::Sparse(t)) => Compared {
            coords: (0..t.nnz()).flat_map(|e| t.coord(e).to_vec()).collect(),
            values: t.values().iter().map(|&v| v.to_c128()).collect(),
        },
        (_, SparseOutput::Sparse(t)) => Compared {
            coords: Vec::new(),
            values: t.values().iter().map(|&v| v.to_c128()).collect(),
        },
        (_, SparseOutput::Dense { data, .. }) => Compared {
            coords: Vec::new(),
            values: data.iter().map(|&v| v.to_c128()).collect(),
        },
    }
}

/// SpGEMM's entries in the compared form, the value `val(row, column, entry)`.
fn entries<T: Scalar>(c: &Csr<T>, val: impl Fn(usize, usize, usize) -> Complex64) -> Compared {
    let mut out = Compared {
        coords: Vec::with_capacity(2 * c.nnz()),
        values: Vec::with_capacity(c.nnz()),
    };
    for i in 0..c.nrows {
        for q in c.indptr[i]..c.indptr[i + 1] {
            out.coords.extend([i, c.indices[q]]);
            out.values.push(val(i, c.indices[q], q));
        }
    }
    out
}

/// The naive dense einsum with operand `k`'s element `x` given by `value`: in f64 for a real
/// `T` (as fast as before), in complex f64 for a complex one.
fn naive_wide<T: Scalar>(
    einsum: &deinsum_expr::ParsedEinsum,
    value: &dyn Fn(usize, u64) -> T,
) -> Vec<Complex64> {
    use deinsum_exec::reference::naive;
    if T::DTYPE.is_complex() {
        naive::<Complex64>(einsum, &|k, x| value(k, x).to_c128())
    } else {
        naive::<f64>(einsum, &|k, x| value(k, x).to_f64())
            .into_iter()
            .map(|v| Complex64::new(v, 0.0))
            .collect()
    }
}

/// The serial reference of `job` in the compared form, and what it is: the naive dense
/// einsum up to [`DENSE_CHECK_POINTS`], else the serial sparse kernel.
pub fn reference<T: Scalar>(job: &SparseJob<T>) -> Result<(Compared, CheckReference), SparseError> {
    let einsum = job.einsum();
    if deinsum_exec::reference::iteration_space(einsum) <= DENSE_CHECK_POINTS {
        let dense: Vec<Vec<T>> = job.sparse().iter().map(SparseTensor::to_dense).collect();
        let sparse_k = job.form().sparse_operands();
        let full = naive_wide::<T>(
            einsum,
            &|k, x| match sparse_k.iter().position(|&s| s == k) {
                Some(p) => dense[p][x as usize],
                None => job.dense_value(k, x),
            },
        );
        let out = match job.form() {
            Form::Sddmm { j, .. } => {
                let s = &job.sparse()[0];
                let n = job.ext(*j);
                Compared {
                    coords: Vec::new(),
                    values: (0..s.nnz())
                        .map(|e| full[s.coord(e)[0] * n + s.coord(e)[1]])
                        .collect(),
                }
            }
            // The serial product's pattern, its values read from the dense result.
            Form::Spgemm => {
                let c = kernels::spgemm(job.csr(0)?, job.csr(1)?)?;
                entries(&c, |i, col, _| full[i * c.ncols + col])
            }
            _ => Compared {
                coords: Vec::new(),
                values: full,
            },
        };
        return Ok((out, CheckReference::Dense));
    }
    Ok((serial_sparse(job)?, CheckReference::SerialSparse))
}

/// The serial sparse kernel's result in the compared form.
fn serial_sparse<T: Scalar>(job: &SparseJob<T>) -> Result<Compared, SparseError> {
    let gen = |k: usize, n: usize| -> Vec<T> { job.dense_rows(k, 0, n, 1) };
    let widened = |v: Vec<T>| Compared {
        coords: Vec::new(),
        values: v.into_iter().map(Scalar::to_c128).collect(),
    };
    Ok(match job.form() {
        Form::Spmm { j, rest, .. } => {
            let w = job.width(rest);
            widened(kernels::spmm(job.csr(0)?, &gen(1, job.ext(*j) * w), w)?)
        }
        Form::Sddmm { i, j, rest } => {
            let w = job.width(rest);
            let (u, v) = (gen(1, job.ext(*i) * w), gen(2, job.ext(*j) * w));
            widened(kernels::sddmm(job.csr(0)?, &u, &v, w)?)
        }
        Form::Spgemm => {
            let c = kernels::spgemm(job.csr(0)?, job.csr(1)?)?;
            entries(&c, |_, _, q| c.vals[q].to_c128())
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
            widened(kernels::mttkrp(&job.sparse()[0], &views, *mode, r)?)
        }
    })
}
