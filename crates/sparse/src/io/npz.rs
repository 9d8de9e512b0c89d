//! SciPy's sparse `.npz` archives (`scipy.sparse.save_npz`): a zip of `.npy` arrays —
//! `format` (`csr`, `csc` or `coo`), `shape`, `data` (real or complex), and
//! `indices`/`indptr` or `row`/`col`.

use crate::{SparseError, SparseTensor};
use deinsum_exec::Scalar;
use ndarray::Array1;
use ndarray_npy::NpzReader;
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Reads a SciPy sparse matrix archive (CSR, CSC or COO; compressed or not). Index arrays may
/// be 32- or 64-bit integers; data any real, integer or bool dtype (converted as NumPy's
/// `astype`), or complex (`<c16`, `<c8`) for a complex `T` (refused for a real one, whose
/// conversion would drop the imaginary parts).
pub fn read_npz<T: Scalar>(path: &Path) -> Result<SparseTensor<T>, SparseError> {
    let file = path.display().to_string();
    let fmt_err = |message: String| SparseError::Format {
        file: file.clone(),
        message,
    };
    if path.is_dir() {
        return Err(fmt_err("is a directory, not a file".into()));
    }
    let format = format_of(path).map_err(fmt_err)?;
    let f = File::open(path).map_err(|source| SparseError::Io {
        file: file.clone(),
        source,
    })?;
    let mut npz = NpzReader::new(f).map_err(|e| fmt_err(format!("not a .npz archive: {e}")))?;
    let shape = ints(&mut npz, "shape").map_err(fmt_err)?;
    if shape.len() != 2 {
        return Err(fmt_err(format!("shape {shape:?} is not a matrix's")));
    }
    let (m, n) = (shape[0] as usize, shape[1] as usize);
    let data = reals::<T>(&mut npz, "data").map_err(fmt_err)?;
    let (rows, cols) = match format.as_str() {
        "coo" => (
            ints(&mut npz, "row").map_err(fmt_err)?,
            ints(&mut npz, "col").map_err(fmt_err)?,
        ),
        "csr" | "csc" => {
            let indptr = ints(&mut npz, "indptr").map_err(fmt_err)?;
            let indices = ints(&mut npz, "indices").map_err(fmt_err)?;
            let major = if format == "csr" { m } else { n };
            let expanded = expand(&indptr, major, indices.len()).map_err(fmt_err)?;
            if format == "csr" {
                (expanded, indices)
            } else {
                (indices, expanded)
            }
        }
        other => {
            return Err(fmt_err(format!(
                "sparse format '{other}' is not read (csr, csc or coo)"
            )))
        }
    };
    if rows.len() != data.len() || cols.len() != data.len() {
        return Err(fmt_err(format!(
            "{} values but {} row and {} column indices",
            data.len(),
            rows.len(),
            cols.len()
        )));
    }
    let mut coords = Vec::with_capacity(2 * data.len());
    for (e, (&i, &j)) in rows.iter().zip(&cols).enumerate() {
        if i < 0 || j < 0 {
            return Err(fmt_err(format!("nonzero {e} has a negative index")));
        }
        coords.extend([i as usize, j as usize]);
    }
    SparseTensor::from_entries(vec![m, n], coords, data).map_err(|e| fmt_err(e.to_string()))
}

/// The compressed row (or column) pointer expanded into one major index per entry.
fn expand(indptr: &[i64], major: usize, nnz: usize) -> Result<Vec<i64>, String> {
    if indptr.len() != major + 1 || indptr[0] != 0 || indptr[major] as usize != nnz {
        return Err(format!(
            "indptr has {} entries ending at {:?}; expected {} ending at {nnz}",
            indptr.len(),
            indptr.last(),
            major + 1
        ));
    }
    let mut out = Vec::with_capacity(nnz);
    for (r, w) in indptr.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(format!("indptr decreases at {r}"));
        }
        out.extend(std::iter::repeat_n(r as i64, (w[1] - w[0]) as usize));
    }
    Ok(out)
}

/// An integer array of any integer dtype, as i64.
fn ints(npz: &mut NpzReader<File>, name: &str) -> Result<Vec<i64>, String> {
    macro_rules! try_as {
        ($($t:ty),*) => {$(
            if let Ok(a) = npz.by_name::<ndarray::OwnedRepr<$t>, ndarray::Ix1>(name) {
                return Ok(a.iter().map(|&x| x as i64).collect());
            }
        )*};
    }
    try_as!(i64, i32, u32, i16, u16, i8, u8);
    Err(format!("no integer array '{name}'"))
}

/// The data array of any real, integer, bool or complex dtype, converted to `T` (complex
/// data only to a complex `T`).
fn reals<T: Scalar>(npz: &mut NpzReader<File>, name: &str) -> Result<Vec<T>, String> {
    macro_rules! try_complex {
        ($($t:ty),*) => {$(
            if let Ok(a) = npz.by_name::<ndarray::OwnedRepr<num_complex::Complex<$t>>, ndarray::Ix1>(name) {
                if !T::DTYPE.is_complex() {
                    return Err(format!(
                        "'{name}' is complex and cannot be read as {} (it would drop the \
                         imaginary parts): use --dtype {}",
                        T::DTYPE,
                        T::DTYPE.complex()
                    ));
                }
                return Ok(a.iter().map(|x| T::from_parts(x.re as f64, x.im as f64)).collect());
            }
        )*};
    }
    try_complex!(f64, f32);
    macro_rules! try_as {
        ($($t:ty),*) => {$(
            if let Ok(a) = npz.by_name::<ndarray::OwnedRepr<$t>, ndarray::Ix1>(name) {
                return Ok(a.iter().map(|&x| T::from_f64(x as f64)).collect());
            }
        )*};
    }
    try_as!(f64, f32, i64, i32, u32, i16, u16, i8, u8);
    if let Ok(a) = npz.by_name::<ndarray::OwnedRepr<bool>, ndarray::Ix1>(name) {
        let a: Array1<bool> = a;
        return Ok(a
            .iter()
            .map(|&x| T::from_f64(f64::from(u8::from(x))))
            .collect());
    }
    Err(format!("no numeric array '{name}'"))
}

/// The archive's `format` entry: a NumPy byte string (`|S3`), which the typed reader does not
/// read, so its few bytes are taken after the `.npy` header.
fn format_of(path: &Path) -> Result<String, String> {
    let f = File::open(path).map_err(|e| e.to_string())?;
    let mut zip = zip::ZipArchive::new(f).map_err(|e| format!("not a .npz archive: {e}"))?;
    let mut entry = zip
        .by_name("format.npy")
        .map_err(|_| "no 'format' array: not written by scipy.sparse.save_npz".to_string())?;
    let mut bytes = Vec::new();
    entry.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("'format' is not a .npy array".into());
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        _ => return Err("'format' has a short header".into()),
    };
    let body = bytes.get(start + len..).unwrap_or(&[]);
    let s: String = body
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect();
    Ok(s.trim().to_ascii_lowercase())
}
