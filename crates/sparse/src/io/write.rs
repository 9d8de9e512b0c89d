//! Writers of sparse results: Matrix Market coordinate (`.mtx`), FROSTT (`.tns`), SciPy's
//! `save_npz` CSR archive (`.npz`), and the densified array (`.npy`). Each writes what the
//! readers of this module (and SciPy's `mmread`/`load_npz`) read back exactly: every stored
//! entry (explicit zeros too), values in the shortest form that parses to the same `f64`.
//! A complex result is written as complex (Matrix Market's `complex` field, complex128 `.npz`
//! data and `.npy` arrays); FROSTT has no complex values, so a complex `.tns` is refused.

use crate::{SparseError, SparseTensor};
use deinsum_exec::scalar::Complex64;
use deinsum_exec::{DType, Scalar};
use ndarray::{aview0, Array1};
use ndarray_npy::{NpzWriter, WritableElement, WriteDataError};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// The file format an output path asks for, by its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// A dense NumPy array (a sparse result densified).
    Npy,
    /// Matrix Market `coordinate real general` (`complex general` for a complex result),
    /// 1-based (matrices only).
    Mtx,
    /// FROSTT: 1-based coordinates then the value, one entry a line (any order).
    Tns,
    /// SciPy's `save_npz` of a `csr_matrix`: `data`, `indices`, `indptr`, `format`, `shape`
    /// (matrices only).
    Npz,
}

impl OutputFormat {
    /// The format `path`'s extension names; another extension is an error naming the file.
    pub fn of(path: &Path) -> Result<Self, SparseError> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("npy") => Ok(Self::Npy),
            Some("mtx") => Ok(Self::Mtx),
            Some("tns") => Ok(Self::Tns),
            Some("npz") => Ok(Self::Npz),
            _ => Err(SparseError::Format {
                file: path.display().to_string(),
                message: "unknown output extension: name a .npy, .mtx, .tns or .npz file".into(),
            }),
        }
    }

    /// Whether the format stores coordinates (not a dense array).
    pub fn is_sparse(self) -> bool {
        self != Self::Npy
    }

    /// Refuses values of `dtype` that the format cannot hold (FROSTT holds real values),
    /// naming the file.
    pub fn check_dtype(self, path: &Path, dtype: DType) -> Result<(), SparseError> {
        if self != Self::Tns || !dtype.is_complex() {
            return Ok(());
        }
        Err(SparseError::Format {
            file: path.display().to_string(),
            message: format!(
                "a FROSTT file holds real values, the result is {}: name a .mtx, .npz or .npy file",
                dtype.numpy_name()
            ),
        })
    }

    /// Refuses a tensor of `order` modes that the format cannot hold (Matrix Market and
    /// SciPy's CSR hold matrices), naming the file.
    pub fn check_order(self, path: &Path, order: usize) -> Result<(), SparseError> {
        let what = match self {
            Self::Mtx => "a Matrix Market file",
            Self::Npz => "a SciPy CSR archive",
            Self::Npy | Self::Tns => return Ok(()),
        };
        if order == 2 {
            return Ok(());
        }
        Err(SparseError::Format {
            file: path.display().to_string(),
            message: format!(
                "{what} holds a matrix, the result has {order} modes: name a .tns or .npy file"
            ),
        })
    }
}

/// Writes `t` in the format `path`'s extension names ([`OutputFormat`]): `.npy` densifies it
/// (streamed, the dense array is never held), the others write every stored entry.
pub fn write<T: Scalar>(path: &Path, t: &SparseTensor<T>) -> Result<(), SparseError> {
    match OutputFormat::of(path)? {
        OutputFormat::Npy => write_npy_dense(path, t),
        OutputFormat::Mtx => write_mtx(path, t),
        OutputFormat::Tns => write_tns(path, t),
        OutputFormat::Npz => write_npz(path, t),
    }
}

/// The I/O error of writing `path`.
fn io_err(path: &Path) -> impl Fn(std::io::Error) -> SparseError + '_ {
    move |source| SparseError::Io {
        file: path.display().to_string(),
        source,
    }
}

/// A buffered writer on a new (or truncated) `path`.
fn create(path: &Path) -> Result<BufWriter<File>, SparseError> {
    if path.is_dir() {
        return Err(SparseError::Format {
            file: path.display().to_string(),
            message: "is a directory, not a file".into(),
        });
    }
    Ok(BufWriter::new(File::create(path).map_err(io_err(path))?))
}

/// Refuses a value that is not finite before anything is written (no reader here takes one
/// back, and a half-written file would be left otherwise).
fn check_finite<T: Scalar>(path: &Path, t: &SparseTensor<T>) -> Result<(), SparseError> {
    let finite = |v: &T| {
        let (re, im) = v.parts();
        re.is_finite() && im.is_finite()
    };
    match t.values().iter().position(|v| !finite(v)) {
        None => Ok(()),
        Some(e) => Err(SparseError::Format {
            file: path.display().to_string(),
            message: format!(
                "entry {e} at {:?} is {}: Matrix Market and FROSTT files hold finite values",
                t.coord(e),
                shown(t.values()[e])
            ),
        }),
    }
}

/// A value as a message shows it: a real one as f64, a complex one as NumPy prints it
/// (`(1+2j)`).
fn shown<T: Scalar>(v: T) -> String {
    let (re, im) = v.parts();
    if T::DTYPE.is_complex() {
        let sign = if im.is_sign_negative() && !im.is_nan() {
            '-'
        } else {
            '+'
        };
        format!("({re}{sign}{}j)", im.abs())
    } else {
        re.to_string()
    }
}

/// A value as text: Rust's `Debug` of an `f64` is the shortest decimal that parses back to the
/// same bits (with an exponent when far from 1); a complex value is its real and imaginary
/// parts so, separated by a space (Matrix Market's `complex` field).
fn value_text<T: Scalar>(v: T) -> String {
    let (re, im) = v.parts();
    if T::DTYPE.is_complex() {
        format!("{re:?} {im:?}")
    } else {
        format!("{re:?}")
    }
}

/// Writes a matrix as Matrix Market `coordinate real general` (`coordinate complex general`
/// for a complex `T`; 1-based), every stored entry in row-major order.
pub fn write_mtx<T: Scalar>(path: &Path, t: &SparseTensor<T>) -> Result<(), SparseError> {
    OutputFormat::Mtx.check_order(path, t.order())?;
    check_finite(path, t)?;
    let mut w = create(path)?;
    let (m, n) = (t.shape()[0], t.shape()[1]);
    let field = if T::DTYPE.is_complex() {
        "complex"
    } else {
        "real"
    };
    let head = format!(
        "%%MatrixMarket matrix coordinate {field} general\n%written by deinsum\n{m} {n} {}\n",
        t.nnz()
    );
    w.write_all(head.as_bytes()).map_err(io_err(path))?;
    let mut line = String::new();
    for e in 0..t.nnz() {
        let c = t.coord(e);
        line.clear();
        line.push_str(&format!("{} {} ", c[0] + 1, c[1] + 1));
        line.push_str(&value_text(t.values()[e]));
        line.push('\n');
        w.write_all(line.as_bytes()).map_err(io_err(path))?;
    }
    w.flush().map_err(io_err(path))
}

/// Writes a tensor of any order as FROSTT `.tns`: 1-based coordinates then the value, one
/// stored entry a line. The format has no header, so an empty tensor (whose order and shape
/// no reader could know) is refused, and so are complex values (the format has none).
pub fn write_tns<T: Scalar>(path: &Path, t: &SparseTensor<T>) -> Result<(), SparseError> {
    OutputFormat::Tns.check_dtype(path, T::DTYPE)?;
    if t.nnz() == 0 {
        return Err(SparseError::Format {
            file: path.display().to_string(),
            message: "the result has no stored entries; a FROSTT file without entries has no order or shape: name a .mtx, .npz or .npy file".into(),
        });
    }
    check_finite(path, t)?;
    let mut w = create(path)?;
    let mut line = String::new();
    for e in 0..t.nnz() {
        line.clear();
        for &x in t.coord(e) {
            line.push_str(&(x + 1).to_string());
            line.push(' ');
        }
        line.push_str(&value_text(t.values()[e]));
        line.push('\n');
        w.write_all(line.as_bytes()).map_err(io_err(path))?;
    }
    w.flush().map_err(io_err(path))
}

/// The archive's `format` entry: NumPy's 3-byte string (`|S3`), which ndarray-npy has no
/// element type for.
#[derive(Clone, Copy)]
struct FormatTag([u8; 3]);

impl WritableElement for FormatTag {
    fn type_descriptor() -> py_literal::Value {
        py_literal::Value::String("|S3".into())
    }

    fn write<W: Write>(&self, mut writer: W) -> Result<(), WriteDataError> {
        writer.write_all(&self.0)?;
        Ok(())
    }

    fn write_slice<W: Write>(slice: &[Self], mut writer: W) -> Result<(), WriteDataError> {
        for x in slice {
            writer.write_all(&x.0)?;
        }
        Ok(())
    }
}

/// Writes a matrix as `scipy.sparse.save_npz` writes a `csr_matrix` (deflate-compressed):
/// `data` (float64; complex128 for a complex `T`), `indices` and `indptr` (int32 when every index fits, as SciPy picks,
/// else int64), `format` (`b'csr'`) and `shape` (int64).
pub fn write_npz<T: Scalar>(path: &Path, t: &SparseTensor<T>) -> Result<(), SparseError> {
    OutputFormat::Npz.check_order(path, t.order())?;
    let csr = t.to_csr()?;
    let npz_err = |e: ndarray_npy::WriteNpzError| SparseError::Format {
        file: path.display().to_string(),
        message: format!("writing the archive: {e}"),
    };
    let mut npz = NpzWriter::new_compressed(create(path)?);
    let narrow = i32::try_from(csr.nnz().max(csr.ncols)).is_ok();
    if narrow {
        let ix: Array1<i32> = csr.indices.iter().map(|&j| j as i32).collect();
        let ip: Array1<i32> = csr.indptr.iter().map(|&p| p as i32).collect();
        npz.add_array("indices", &ix).map_err(npz_err)?;
        npz.add_array("indptr", &ip).map_err(npz_err)?;
    } else {
        let ix: Array1<i64> = csr.indices.iter().map(|&j| j as i64).collect();
        let ip: Array1<i64> = csr.indptr.iter().map(|&p| p as i64).collect();
        npz.add_array("indices", &ix).map_err(npz_err)?;
        npz.add_array("indptr", &ip).map_err(npz_err)?;
    }
    npz.add_array("format", &aview0(&FormatTag(*b"csr")))
        .map_err(npz_err)?;
    let shape: Array1<i64> = t.shape().iter().map(|&n| n as i64).collect();
    npz.add_array("shape", &shape).map_err(npz_err)?;
    if T::DTYPE.is_complex() {
        let data: Array1<Complex64> = csr.vals.iter().map(|&v| v.to_c128()).collect();
        npz.add_array("data", &data).map_err(npz_err)?;
    } else {
        let data: Array1<f64> = csr.vals.iter().map(|v| v.to_f64()).collect();
        npz.add_array("data", &data).map_err(npz_err)?;
    }
    npz.finish().map_err(npz_err)?;
    Ok(())
}

/// Bytes of a result of `shape` and `dtype` densified as `.npy` data (float64, or complex128
/// for a complex `dtype`: [`DType::wide`]; without the header), `None` past `u64`.
pub fn dense_bytes(shape: &[usize], dtype: DType) -> Option<u64> {
    let word = dtype.wide().bytes() as u64;
    shape
        .iter()
        .try_fold(word, |acc, &n| acc.checked_mul(n as u64))
}

/// Writes `t` densified as a C-ordered `.npy` of float64 (complex128 for a complex `T`): a
/// stored entry's value at its coordinates, zeros elsewhere, streamed entry by entry.
pub fn write_npy_dense<T: Scalar>(path: &Path, t: &SparseTensor<T>) -> Result<(), SparseError> {
    if T::DTYPE.is_complex() {
        write_npy_dense_as::<Complex64, T>(path, t, T::to_c128)
    } else {
        write_npy_dense_as::<f64, T>(path, t, T::to_f64)
    }
}

/// [`write_npy_dense`] with the values converted to `W` by `to`.
fn write_npy_dense_as<W: Scalar, T: Scalar>(
    path: &Path,
    t: &SparseTensor<T>,
    to: fn(T) -> W,
) -> Result<(), SparseError> {
    let mut w = create(path)?;
    w.write_all(&deinsum_exec::npy::header_bytes::<W>(t.shape()))
        .map_err(io_err(path))?;
    let total: usize = t.shape().iter().product();
    let zeros = |w: &mut BufWriter<File>, n: usize| -> std::io::Result<()> {
        const BLOCK: [u8; 8 * 512] = [0u8; 8 * 512];
        let mut left = W::BYTES * n;
        while left > 0 {
            let k = left.min(BLOCK.len());
            w.write_all(&BLOCK[..k])?;
            left -= k;
        }
        Ok(())
    };
    let mut next = 0usize;
    let mut bytes = Vec::with_capacity(W::BYTES);
    for e in 0..t.nnz() {
        let lin = t
            .coord(e)
            .iter()
            .zip(t.shape())
            .fold(0usize, |acc, (&x, &n)| acc * n + x);
        zeros(&mut w, lin - next).map_err(io_err(path))?;
        bytes.clear();
        W::extend_bytes(&[to(t.values()[e])], &mut bytes);
        w.write_all(&bytes).map_err(io_err(path))?;
        next = lin + 1;
    }
    zeros(&mut w, total - next).map_err(io_err(path))?;
    w.flush().map_err(io_err(path))
}
