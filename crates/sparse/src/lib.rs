//! Sparse operands for deinsum.
//!
//! - [`SparseTensor`]: sorted COO of any order (duplicates summed, as SciPy does; explicit
//!   zeros kept), with [`Csr`] for matrices;
//! - [`io`]: Matrix Market (`.mtx`), FROSTT (`.tns`) and SciPy (`.npz`) readers whose errors
//!   name the file, line and field;
//! - [`gen`]: seeded generators (uniform density, Graph500's R-MAT);
//! - [`kernels`]: local CSR SpMV/SpMM, SDDMM, Gustavson SpGEMM and COO MTTKRP;
//! - [`fetch`]: row fetches planned from a pattern: a row-distributed matrix (dense or CSR)
//!   of which every rank receives exactly the rows its nonzeros touch;
//! - [`halo`]: the distributed SpMM `ij,jk->ik` and SDDMM `ij,ik,jk->ij` with the first
//!   operand sparse: rows partitioned by nonzeros, the dense operand's halo fetched;
//! - [`fine`]: the fine-grain SpMV (each cross nonzero computed at its row's owner, which
//!   fetches an x entry, or its column's, which pushes a partial y entry, in one exchange;
//!   the choice a minimum vertex cover, from [`cover`]);
//! - [`cover`]: minimum vertex cover of a bipartite graph (Hopcroft-Karp, König);
//! - [`dist`]: the distributed SpGEMM (both sparse) and sparse MTTKRP (any mode, over a grid
//!   of ranks with nnz-balanced cut points);
//!
//! - [`einsum`]: sparse einsums as a library: the recogniser of the built forms, one interface
//!   over the plan kinds ([`einsum::SparsePlan`]), the per-rank run generic over the
//!   communicator and the element type, and its report;
//!
//! every plan's predicted words are exact, held against the communicator's count in the tests.

pub mod cover;
pub mod dist;
pub mod einsum;
pub mod fetch;
pub mod fine;
pub mod gen;
pub mod halo;
pub mod io;
pub mod kernels;

use deinsum_exec::{CommError, Scalar};

/// Why a sparse operand cannot be read, built or used.
#[derive(Debug, thiserror::Error)]
pub enum SparseError {
    /// A malformed line of a text file.
    #[error("{file}:{line}: {field}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// The field that is wrong (`header`, `size line`, `row index`, `value`, ...).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A file that is not of the expected kind as a whole (a count that does not match, a
    /// missing array of an archive, an unsupported format).
    #[error("{file}: {message}")]
    Format {
        /// The file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// The file cannot be read.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A coordinate outside the tensor's shape.
    #[error("nonzero {entry}: index {coord} of mode {mode} is out of range for extent {extent}")]
    OutOfRange {
        /// The nonzero's position in the input order.
        entry: usize,
        /// The mode (0-based).
        mode: usize,
        /// The 0-based coordinate.
        coord: usize,
        /// The mode's extent.
        extent: usize,
    },
    /// Shapes that do not fit together.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// An einsum with sparse operands whose form is not built.
    #[error("sparse operands: {0} is not built yet")]
    NotBuilt(String),
    /// Options that do not apply to this einsum.
    #[error("{0}")]
    Usage(String),
    /// The communicator failed.
    #[error(transparent)]
    Comm(#[from] CommError),
}

/// A sparse tensor in sorted coordinate form: the nonzeros in lexicographic order of their
/// coordinates, each coordinate once. Invariant: `coords.len() == order * nnz`, every
/// coordinate is within `shape`, coordinates strictly increase.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseTensor<T> {
    shape: Vec<usize>,
    /// Coordinates, `order` per nonzero, nonzero after nonzero.
    coords: Vec<usize>,
    vals: Vec<T>,
}

impl<T: Scalar> SparseTensor<T> {
    /// Builds a tensor of `shape` from unordered entries (`coords` holds `shape.len()`
    /// coordinates per entry): sorted, duplicates summed (as SciPy's `sum_duplicates`),
    /// explicit zeros kept. A coordinate outside the shape is an error naming the entry.
    pub fn from_entries(
        shape: Vec<usize>,
        coords: Vec<usize>,
        vals: Vec<T>,
    ) -> Result<Self, SparseError> {
        let order = shape.len();
        if coords.len() != order * vals.len() {
            return Err(SparseError::Shape(format!(
                "{} coordinates for {} values of an order-{order} tensor",
                coords.len(),
                vals.len()
            )));
        }
        for (e, c) in coords.chunks(order.max(1)).enumerate().take(vals.len()) {
            for (mode, (&x, &n)) in c.iter().zip(&shape).enumerate() {
                if x >= n {
                    return Err(SparseError::OutOfRange {
                        entry: e,
                        mode,
                        coord: x,
                        extent: n,
                    });
                }
            }
        }
        let mut perm: Vec<usize> = (0..vals.len()).collect();
        let key = |e: usize| &coords[e * order..(e + 1) * order];
        perm.sort_by(|&a, &b| key(a).cmp(key(b)));
        let mut out_c: Vec<usize> = Vec::with_capacity(coords.len());
        let mut out_v: Vec<T> = Vec::with_capacity(vals.len());
        for e in perm {
            let c = key(e);
            let n = out_v.len();
            if n > 0 && &out_c[(n - 1) * order..n * order] == c {
                out_v[n - 1] += vals[e];
            } else {
                out_c.extend_from_slice(c);
                out_v.push(vals[e]);
            }
        }
        Ok(SparseTensor {
            shape,
            coords: out_c,
            vals: out_v,
        })
    }

    /// The entries of a dense row-major array of `shape` that are not zero (a dense result
    /// written to a sparse file), in coordinate order.
    pub fn from_dense(shape: Vec<usize>, data: &[T]) -> Result<Self, SparseError> {
        let total: usize = shape.iter().product();
        if data.len() != total {
            return Err(SparseError::Shape(format!(
                "{} values for a dense array of shape {shape:?}",
                data.len()
            )));
        }
        let mut coords = Vec::new();
        let mut vals = Vec::new();
        let mut c = vec![0usize; shape.len()];
        for (lin, &v) in data.iter().enumerate() {
            if v != T::default() {
                // Row-major: the last mode varies fastest.
                let mut rest = lin;
                for (x, &n) in c.iter_mut().zip(&shape).rev() {
                    *x = rest % n;
                    rest /= n;
                }
                coords.extend_from_slice(&c);
                vals.push(v);
            }
        }
        Ok(SparseTensor {
            shape,
            coords,
            vals,
        })
    }

    /// The same pattern with other values (a masked product's result in its operand's
    /// pattern), explicit zeros kept.
    pub fn with_values(&self, vals: Vec<T>) -> Result<Self, SparseError> {
        if vals.len() != self.nnz() {
            return Err(SparseError::Shape(format!(
                "{} values for a pattern of {} entries",
                vals.len(),
                self.nnz()
            )));
        }
        Ok(SparseTensor {
            shape: self.shape.clone(),
            coords: self.coords.clone(),
            vals,
        })
    }

    /// The extents of the modes.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of modes.
    pub fn order(&self) -> usize {
        self.shape.len()
    }

    /// The number of stored entries (explicit zeros included).
    pub fn nnz(&self) -> usize {
        self.vals.len()
    }

    /// The coordinates of stored entry `e`.
    pub fn coord(&self, e: usize) -> &[usize] {
        let o = self.order();
        &self.coords[e * o..(e + 1) * o]
    }

    /// The stored values, in coordinate order.
    pub fn values(&self) -> &[T] {
        &self.vals
    }

    /// The dense row-major array (for checks at small sizes).
    pub fn to_dense(&self) -> Vec<T> {
        let total: usize = self.shape.iter().product();
        let mut d = vec![T::default(); total];
        for e in 0..self.nnz() {
            let lin = self
                .coord(e)
                .iter()
                .zip(&self.shape)
                .fold(0usize, |acc, (&x, &n)| acc * n + x);
            d[lin] += self.vals[e];
        }
        d
    }

    /// The CSR form of a matrix (order 2).
    pub fn to_csr(&self) -> Result<Csr<T>, SparseError> {
        if self.order() != 2 {
            return Err(SparseError::Shape(format!(
                "CSR needs a matrix, this tensor has {} modes",
                self.order()
            )));
        }
        let (m, n) = (self.shape[0], self.shape[1]);
        let mut indptr = vec![0usize; m + 1];
        for e in 0..self.nnz() {
            indptr[self.coords[2 * e] + 1] += 1;
        }
        for i in 0..m {
            indptr[i + 1] += indptr[i];
        }
        // Sorted COO is row-major: the columns are already in CSR order.
        let indices = (0..self.nnz()).map(|e| self.coords[2 * e + 1]).collect();
        Ok(Csr {
            nrows: m,
            ncols: n,
            indptr,
            indices,
            vals: self.vals.clone(),
        })
    }
}

/// A matrix in compressed sparse row form. Invariant: `indptr` has `nrows + 1` nondecreasing
/// entries from 0 to `nnz`; each row's column indices strictly increase and are `< ncols`.
/// Columns are `usize` unless a rank's localized rows store them in 4 bytes (`I = u32`).
#[derive(Clone, Debug, PartialEq)]
pub struct Csr<T, I = usize> {
    /// Rows.
    pub nrows: usize,
    /// Columns.
    pub ncols: usize,
    /// Row `i`'s entries are `indptr[i]..indptr[i + 1]`.
    pub indptr: Vec<usize>,
    /// Column of each entry.
    pub indices: Vec<I>,
    /// Value of each entry.
    pub vals: Vec<T>,
}

impl<T: Scalar, I> Csr<T, I> {
    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.vals.len()
    }
}

impl<T: Scalar> Csr<T> {
    /// The same matrix with 4-byte column indices, or `None` when a column does not fit.
    pub fn narrow(&self) -> Option<Csr<T, u32>> {
        if u32::try_from(self.ncols).is_err() {
            return None;
        }
        Some(Csr {
            nrows: self.nrows,
            ncols: self.ncols,
            indptr: self.indptr.clone(),
            indices: self.indices.iter().map(|&j| j as u32).collect(),
            vals: self.vals.clone(),
        })
    }

    /// Rows `lo..hi` as a CSR matrix of `hi - lo` rows (columns unchanged).
    pub fn rows(&self, lo: usize, hi: usize) -> Csr<T> {
        let (a, b) = (self.indptr[lo], self.indptr[hi]);
        Csr {
            nrows: hi - lo,
            ncols: self.ncols,
            indptr: self.indptr[lo..=hi].iter().map(|&p| p - a).collect(),
            indices: self.indices[a..b].to_vec(),
            vals: self.vals[a..b].to_vec(),
        }
    }

    /// The COO form.
    pub fn to_tensor(&self) -> SparseTensor<T> {
        let mut coords = Vec::with_capacity(2 * self.nnz());
        for i in 0..self.nrows {
            for p in self.indptr[i]..self.indptr[i + 1] {
                coords.push(i);
                coords.push(self.indices[p]);
            }
        }
        SparseTensor {
            shape: vec![self.nrows, self.ncols],
            coords,
            vals: self.vals.clone(),
        }
    }
}
