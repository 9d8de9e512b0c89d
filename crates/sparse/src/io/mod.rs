//! Readers of sparse files: Matrix Market (`.mtx`), FROSTT (`.tns`) and SciPy's `.npz`
//! (`scipy.sparse.save_npz`, CSR or COO), and the writers of sparse results in the same
//! formats (or densified as `.npy`). Every error names the file, and for text files the line
//! and the field.

mod mtx;
mod npz;
mod tns;
mod write;

pub use mtx::read_mtx;
pub use npz::read_npz;
pub use tns::read_tns;
pub use write::{
    dense_bytes, write, write_mtx, write_npy_dense, write_npz, write_tns, OutputFormat,
};

use crate::{SparseError, SparseTensor};
use deinsum_exec::Scalar;
use std::path::Path;

/// Whether `path` names a sparse file this module reads (by its extension).
pub fn is_sparse_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("mtx" | "tns" | "npz")
    )
}

/// Reads a sparse tensor, choosing the reader by the extension. `shape`, when given, is the
/// tensor's shape (a FROSTT file does not carry one; for the other formats it must agree).
pub fn read<T: Scalar>(
    path: &Path,
    shape: Option<&[usize]>,
) -> Result<SparseTensor<T>, SparseError> {
    let t = match path.extension().and_then(|e| e.to_str()) {
        Some("mtx") => read_mtx(path)?,
        Some("tns") => read_tns(path, shape)?,
        Some("npz") => read_npz(path)?,
        _ => {
            return Err(SparseError::Format {
                file: path.display().to_string(),
                message: "not a sparse file (expected .mtx, .tns or .npz)".into(),
            })
        }
    };
    match shape {
        Some(s) => check_shape(path, t, s),
        None => Ok(t),
    }
}

/// `t`, read from `path`, if it has `shape`; else the error naming the file and both shapes.
pub fn check_shape<T: Scalar>(
    path: &Path,
    t: SparseTensor<T>,
    shape: &[usize],
) -> Result<SparseTensor<T>, SparseError> {
    if t.shape() != shape {
        return Err(SparseError::Format {
            file: path.display().to_string(),
            message: format!("has shape {:?}, expected {:?}", t.shape(), shape),
        });
    }
    Ok(t)
}

/// The text of `path`, or an error naming it (a directory says so).
fn read_text(path: &Path) -> Result<String, SparseError> {
    let file = path.display().to_string();
    if path.is_dir() {
        return Err(SparseError::Format {
            file,
            message: "is a directory, not a file".into(),
        });
    }
    std::fs::read_to_string(path).map_err(|source| SparseError::Io { file, source })
}

/// A parse error at `line` (1-based) of `path`.
fn parse_err(path: &Path, line: usize, field: &str, message: impl Into<String>) -> SparseError {
    SparseError::Parse {
        file: path.display().to_string(),
        line,
        field: field.to_string(),
        message: message.into(),
    }
}

/// Parses a 1-based index no larger than `extent` (0 when unbounded) into a 0-based one.
fn one_based(
    path: &Path,
    line: usize,
    field: &str,
    tok: Option<&str>,
    extent: usize,
) -> Result<usize, SparseError> {
    let tok = tok.ok_or_else(|| parse_err(path, line, field, "missing"))?;
    let v: usize = tok
        .parse()
        .map_err(|_| parse_err(path, line, field, format!("'{tok}' is not an index")))?;
    if v == 0 {
        return Err(parse_err(
            path,
            line,
            field,
            "0 is out of range (indices are 1-based)",
        ));
    }
    if extent > 0 && v > extent {
        return Err(parse_err(
            path,
            line,
            field,
            format!("{v} is out of range 1..={extent}"),
        ));
    }
    Ok(v - 1)
}

/// Parses a real value.
fn value(path: &Path, line: usize, tok: Option<&str>) -> Result<f64, SparseError> {
    let tok = tok.ok_or_else(|| parse_err(path, line, "value", "missing"))?;
    let v: f64 = tok
        .parse()
        .map_err(|_| parse_err(path, line, "value", format!("'{tok}' is not a number")))?;
    if !v.is_finite() {
        return Err(parse_err(
            path,
            line,
            "value",
            format!("'{tok}' is not finite"),
        ));
    }
    Ok(v)
}
