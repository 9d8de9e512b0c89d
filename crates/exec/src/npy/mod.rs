//! Parallel `.npy` input and output: every rank reads or writes only its own block, by seeking.
//!
//! The format is NumPy's (versions 1.0, 2.0 and 3.0): a magic string, a version, a header
//! length, a Python-literal header dictionary (`descr`, `fortran_order`, `shape`), then the raw
//! data. Arrays in C or Fortran order are read; elements of any float, complex, integer or
//! bool type in either byte order are converted to the run's dtype as NumPy's `astype` does
//! ([`ElemType`]; complex into a real run is refused); written files are C-ordered
//! little-endian in the run's dtype (`<f8`, `<f4`, `<c16`, `<c8`).
//!
//! Readers map the distinct indices of an operand to its storage dimensions, so operands with
//! diagonals (an index repeated in one operand) and broadcast dimensions are read in place.

use std::path::{Path, PathBuf};

use crate::comm::CommError;

mod dtype;
mod header;
mod literal;
mod read;
mod write;

pub use dtype::{ElemType, Kind};
pub use header::{header_bytes, read_header};
pub use read::{check_operand_file, read_operand_block};
pub use write::write_distributed;

/// The magic prefix of every `.npy` file.
pub(crate) const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// A `.npy` failure; every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// The operating system refused an operation.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a well-formed `.npy` file.
    #[error("{}: not a valid .npy file: {reason}", .path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The element type is not one the reader converts (complex, half, strings, structured).
    #[error("{}: expected dtype {expected}, found {found}", .path.display())]
    Dtype {
        /// The file.
        path: PathBuf,
        /// What the reader accepts.
        expected: String,
        /// The dtype in the file.
        found: String,
    },
    /// The array's shape differs from the operand's.
    #[error("{}: expected shape {}, found {}", .path.display(), fmt_shape(.expected), fmt_shape(.found))]
    Shape {
        /// The file.
        path: PathBuf,
        /// The shape the einsum's extents give the operand.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// The arguments do not describe a block of the array (wrong rank, out of range, sizes).
    #[error("{}: {reason}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The block's buffer cannot be allocated.
    #[error(transparent)]
    OutOfMemory(#[from] crate::buffers::OutOfMemory),
    /// Another rank failed while writing the file.
    #[error("{}: rank {rank} failed while writing its part of the file", .path.display())]
    PeerFailed {
        /// The file.
        path: PathBuf,
        /// The (highest) failing rank.
        rank: usize,
    },
    /// A collective failed.
    #[error("{}: {source}", .path.display())]
    Comm {
        /// The file.
        path: PathBuf,
        /// The communicator's error.
        #[source]
        source: CommError,
    },
}

/// Formats a shape the way NumPy prints it: `(3, 4)`, `(5,)`, `()`.
pub fn fmt_shape(shape: &[usize]) -> String {
    match shape {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(|n| n.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// The parsed header of a `.npy` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// Format version `(major, minor)`.
    pub version: (u8, u8),
    /// The dtype descriptor, e.g. `<f8`.
    pub descr: String,
    /// Whether the data is column-major.
    pub fortran_order: bool,
    /// The array's shape.
    pub shape: Vec<usize>,
    /// Byte offset of the first element.
    pub data_offset: u64,
}

impl NpyHeader {
    /// The element type, `None` when it is not one the reader converts.
    pub fn elem_type(&self) -> Option<ElemType> {
        ElemType::parse(&self.descr)
    }

    /// Number of elements, `None` on overflow.
    pub fn len(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &n| acc.checked_mul(n as u64))
    }

    /// True when the array has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> NpyError + '_ {
    move |source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn format_err(path: &Path, reason: impl Into<String>) -> NpyError {
    NpyError::Format {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

pub(crate) fn invalid(path: &Path, reason: impl Into<String>) -> NpyError {
    NpyError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}
#[cfg(test)]
mod tests;
