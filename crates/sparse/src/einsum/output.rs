//! Writing a sparse einsum's result to a file, and the check, before the run, that it can be.

use super::{Form, SparseOutput};
use crate::io::{self, OutputFormat};
use crate::{SparseError, SparseTensor};
use deinsum_exec::{DType, Scalar};
use std::path::Path;

fn named(e: SparseError) -> SparseError {
    SparseError::Usage(format!("--output {e}"))
}

/// Refuses, before the run, an output file the result of `form` (of `shape`, in `dtype`)
/// cannot be written to: an extension naming no format, a matrix format (`.mtx`, `.npz`) for
/// a result of another order, a complex result to FROSTT (`.tns`), or a sparse result to
/// `.npy` whose dense array exceeds `avail` bytes (the array a reader such as `numpy.load`
/// would have to hold; no limit when unknown).
pub fn check_output_file(
    form: &Form,
    shape: &[usize],
    dtype: DType,
    out: &Path,
    avail: Option<u64>,
) -> Result<(), SparseError> {
    let format = OutputFormat::of(out).map_err(named)?;
    format.check_order(out, shape.len()).map_err(named)?;
    format.check_dtype(out, dtype).map_err(named)?;
    if format != OutputFormat::Npy || !form.sparse_result() {
        return Ok(());
    }
    // A sparse result is densified as float64 or complex128 ([`io::write_npy_dense`]).
    let bytes = io::dense_bytes(shape, dtype);
    match (bytes, avail) {
        (Some(b), Some(a)) if b <= a => return Ok(()),
        // The node's memory is unknown: write it.
        (Some(_), None) => return Ok(()),
        _ => {}
    }
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let size = bytes.map_or("more than 2^64".into(), |b| b.to_string());
    let avail = avail.map_or(String::new(), |a| {
        format!(", more than this node's available memory ({a} bytes)")
    });
    Err(SparseError::Usage(format!(
        "--output {}: the {} result is sparse; densified as .npy it is {} x {} = {size} bytes{avail}; name {} file to write its stored entries",
        out.display(),
        form.name(),
        dims.join(" x "),
        dtype.wide().numpy_name(),
        if dtype.is_complex() { "a .mtx or .npz" } else { "a .mtx, .npz or .tns" },
    )))
}

/// Writes `output` to `path` in the format its extension names (checked before the run by
/// [`check_output_file`]): a sparse result's stored entries, a dense result as `.npy` or its
/// nonzeros in a sparse format.
pub fn write_output<T: Scalar>(output: &SparseOutput<T>, path: &Path) -> Result<(), SparseError> {
    let result = match output {
        SparseOutput::Sparse(t) => t.clone(),
        SparseOutput::Dense { shape, data } => {
            if OutputFormat::of(path).map_err(named)? == OutputFormat::Npy {
                let mut bytes = deinsum_exec::npy::header_bytes::<T>(shape);
                T::extend_bytes(data, &mut bytes);
                return std::fs::write(path, bytes)
                    .map_err(|e| SparseError::Usage(format!("--output {}: {e}", path.display())));
            }
            SparseTensor::from_dense(shape.clone(), data).map_err(named)?
        }
    };
    io::write(path, &result).map_err(named)
}
