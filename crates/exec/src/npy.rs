//! Parallel `.npy` input and output: every rank reads or writes only its own block, by seeking.
//!
//! The format is NumPy's (versions 1.0, 2.0 and 3.0): a magic string, a version, a header
//! length, a Python-literal header dictionary (`descr`, `fortran_order`, `shape`), then the raw
//! little-endian data. Only C-ordered `<f8` and `<f4` arrays are accepted.
//!
//! Readers map the distinct indices of an operand to its storage dimensions, so operands with
//! diagonals (an index repeated in one operand) and broadcast dimensions are read in place.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use deinsum_expr::{Dim, Index, Operand};
use deinsum_plan::{Block, Distribution};

use crate::comm::{CommError, Communicator};
use crate::scalar::Scalar;

/// The magic prefix of every `.npy` file.
const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Upper bound on the bytes converted at once, so a read never holds a block twice in memory.
const CHUNK_BYTES: usize = 1 << 22;

/// Largest header accepted (a sane dictionary is a few hundred bytes).
const MAX_HEADER: usize = 1 << 20;

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
    /// The element type differs from the one asked for.
    #[error("{}: expected dtype {expected}, found {found}", .path.display())]
    Dtype {
        /// The file.
        path: PathBuf,
        /// The dtype the computation needs (`<f8` or `<f4`).
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
    /// The array is stored in Fortran (column-major) order.
    #[error(
        "{}: the array is stored in Fortran order; only C order is supported \
         (save numpy.ascontiguousarray(a))",
        .path.display()
    )]
    FortranOrder {
        /// The file.
        path: PathBuf,
    },
    /// The arguments do not describe a block of the array (wrong rank, out of range, sizes).
    #[error("{}: {reason}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
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

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> NpyError + '_ {
    move |source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn format_err(path: &Path, reason: impl Into<String>) -> NpyError {
    NpyError::Format {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn invalid(path: &Path, reason: impl Into<String>) -> NpyError {
    NpyError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads and parses the header of the `.npy` file at `path` (nothing beyond the header is read).
pub fn read_header(path: &Path) -> Result<NpyHeader, NpyError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    read_header_from(path, &mut f)
}

fn read_header_from(path: &Path, f: &mut File) -> Result<NpyHeader, NpyError> {
    let mut pre = [0u8; 8];
    f.read_exact(&mut pre)
        .map_err(|_| format_err(path, "file too short for a .npy header"))?;
    if &pre[..6] != MAGIC {
        return Err(format_err(path, "missing the \\x93NUMPY magic string"));
    }
    let version = (pre[6], pre[7]);
    let (len, start) = match version.0 {
        1 => {
            let mut b = [0u8; 2];
            f.read_exact(&mut b)
                .map_err(|_| format_err(path, "truncated header length"))?;
            (u16::from_le_bytes(b) as usize, 10u64)
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            f.read_exact(&mut b)
                .map_err(|_| format_err(path, "truncated header length"))?;
            (u32::from_le_bytes(b) as usize, 12u64)
        }
        v => {
            return Err(format_err(
                path,
                format!("unsupported format version {v}.{}", version.1),
            ))
        }
    };
    if len > MAX_HEADER {
        return Err(format_err(
            path,
            format!("header of {len} bytes is too long"),
        ));
    }
    let mut raw = vec![0u8; len];
    f.read_exact(&mut raw)
        .map_err(|_| format_err(path, "truncated header"))?;
    let text = if version.0 == 3 {
        String::from_utf8(raw).map_err(|_| format_err(path, "header is not UTF-8"))?
    } else {
        if !raw.is_ascii() {
            return Err(format_err(path, "header is not ASCII"));
        }
        String::from_utf8(raw).map_err(|_| format_err(path, "header is not ASCII"))?
    };
    let dict = match Literal::parse(&text) {
        Ok(Literal::Dict(d)) => d,
        Ok(_) => return Err(format_err(path, "header is not a dictionary")),
        Err(e) => return Err(format_err(path, format!("header: {e}"))),
    };
    let get = |k: &str| {
        dict.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v)
            .ok_or_else(|| format_err(path, format!("header lacks the key '{k}'")))
    };
    let descr = match get("descr")? {
        Literal::Str(s) => s.clone(),
        other => {
            return Err(NpyError::Dtype {
                path: path.to_path_buf(),
                expected: "<f8 or <f4".into(),
                found: format!("structured dtype {}", other.describe()),
            })
        }
    };
    let fortran_order = match get("fortran_order")? {
        Literal::Bool(b) => *b,
        _ => return Err(format_err(path, "'fortran_order' is not True or False")),
    };
    let shape = match get("shape")? {
        Literal::Tuple(items) => items
            .iter()
            .map(|v| match v {
                Literal::Int(n) => Ok(*n),
                _ => Err(format_err(path, "'shape' holds a non-integer")),
            })
            .collect::<Result<Vec<usize>, NpyError>>()?,
        _ => return Err(format_err(path, "'shape' is not a tuple")),
    };
    let data_offset = start + len as u64;
    Ok(NpyHeader {
        version,
        descr,
        fortran_order,
        shape,
        data_offset,
    })
}

/// A Python literal as it occurs in a `.npy` header.
#[derive(Clone, Debug, PartialEq)]
enum Literal {
    Str(String),
    Bool(bool),
    Int(usize),
    Tuple(Vec<Literal>),
    List(Vec<Literal>),
    Dict(Vec<(String, Literal)>),
}

impl Literal {
    fn describe(&self) -> String {
        match self {
            Literal::Str(s) => format!("'{s}'"),
            Literal::Bool(b) => if *b { "True" } else { "False" }.into(),
            Literal::Int(n) => n.to_string(),
            Literal::Tuple(v) => format!("({} items)", v.len()),
            Literal::List(v) => format!("[{} fields]", v.len()),
            Literal::Dict(v) => format!("{{{} keys}}", v.len()),
        }
    }

    fn parse(text: &str) -> Result<Literal, String> {
        let mut p = LitParser {
            s: text.as_bytes(),
            pos: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.pos != p.s.len() {
            return Err(format!("unexpected text at byte {}", p.pos));
        }
        Ok(v)
    }
}

/// A recursive-descent parser of the Python literal subset NumPy writes.
struct LitParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl LitParser<'_> {
    fn ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn value(&mut self) -> Result<Literal, String> {
        match self.peek() {
            Some(b'{') => self.seq(b'}').map(|items| {
                Literal::Dict(
                    items
                        .into_iter()
                        .map(|(k, v)| (k.unwrap_or_default(), v))
                        .collect(),
                )
            }),
            Some(b'(') => self
                .seq(b')')
                .map(|items| Literal::Tuple(items.into_iter().map(|(_, v)| v).collect())),
            Some(b'[') => self
                .seq(b']')
                .map(|items| Literal::List(items.into_iter().map(|(_, v)| v).collect())),
            Some(q @ (b'\'' | b'"')) => self.string(q).map(Literal::Str),
            Some(c) if c.is_ascii_digit() => self.int(),
            Some(b'T') => self.word("True", Literal::Bool(true)),
            Some(b'F') => self.word("False", Literal::Bool(false)),
            Some(c) => Err(format!("unexpected '{}' at byte {}", c as char, self.pos)),
            None => Err("unexpected end".into()),
        }
    }

    /// A bracketed, comma-separated sequence; for dicts every item is `'key': value`.
    fn seq(&mut self, close: u8) -> Result<Vec<(Option<String>, Literal)>, String> {
        let is_dict = close == b'}';
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.pos += 1;
                return Ok(items);
            }
            let key = if is_dict {
                let k = match self.value()? {
                    Literal::Str(k) => k,
                    _ => {
                        return Err(format!(
                            "dictionary key is not a string at byte {}",
                            self.pos
                        ))
                    }
                };
                if self.peek() != Some(b':') {
                    return Err(format!("expected ':' at byte {}", self.pos));
                }
                self.pos += 1;
                Some(k)
            } else {
                None
            };
            let v = self.value()?;
            items.push((key, v));
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(c) if c == close => {}
                _ => {
                    return Err(format!(
                        "expected ',' or '{}' at byte {}",
                        close as char, self.pos
                    ))
                }
            }
        }
    }

    fn string(&mut self, quote: u8) -> Result<String, String> {
        let start = self.pos + 1;
        let mut i = start;
        while i < self.s.len() && self.s[i] != quote {
            if self.s[i] == b'\\' {
                return Err(format!("escape sequences are not supported (byte {i})"));
            }
            i += 1;
        }
        if i >= self.s.len() {
            return Err("unterminated string".into());
        }
        self.pos = i + 1;
        std::str::from_utf8(&self.s[start..i])
            .map(str::to_string)
            .map_err(|_| "string is not UTF-8".into())
    }

    fn int(&mut self) -> Result<Literal, String> {
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        let digits = std::str::from_utf8(&self.s[start..self.pos]).map_err(|e| e.to_string())?;
        let n: usize = digits
            .parse()
            .map_err(|_| format!("integer {digits} does not fit in usize"))?;
        // Python 2 wrote long integers with an `L` suffix.
        if self.s.get(self.pos) == Some(&b'L') {
            self.pos += 1;
        }
        Ok(Literal::Int(n))
    }

    fn word(&mut self, w: &str, v: Literal) -> Result<Literal, String> {
        if self.s[self.pos..].starts_with(w.as_bytes()) {
            self.pos += w.len();
            Ok(v)
        } else {
            Err(format!("unexpected word at byte {}", self.pos))
        }
    }
}

/// Checks the header against the dtype `T` and the expected shape.
fn check_header<T: Scalar>(path: &Path, h: &NpyHeader, expected: &[usize]) -> Result<(), NpyError> {
    if h.descr != T::NPY_DTYPE {
        return Err(NpyError::Dtype {
            path: path.to_path_buf(),
            expected: T::NPY_DTYPE.into(),
            found: h.descr.clone(),
        });
    }
    if h.shape != expected {
        return Err(NpyError::Shape {
            path: path.to_path_buf(),
            expected: expected.to_vec(),
            found: h.shape.clone(),
        });
    }
    if h.fortran_order && h.shape.iter().filter(|&&n| n > 1).count() > 1 {
        return Err(NpyError::FortranOrder {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Row-major element strides of `shape`, `None` on overflow.
fn strides(shape: &[usize]) -> Option<Vec<u64>> {
    let mut s = vec![0u64; shape.len()];
    let mut acc = 1u64;
    for k in (0..shape.len()).rev() {
        s[k] = acc;
        acc = acc.checked_mul(shape[k] as u64)?;
    }
    Some(s)
}

/// Calls `f(offset, len)` (in elements) for the storage runs of `block`, in the block's row-major
/// order, where `stride[q]` is the storage stride of the block's dimension `q`. Adjacent runs
/// are merged, so a block spanning whole rows is one run.
fn for_each_run<E>(
    stride: &[u64],
    block: &Block,
    mut f: impl FnMut(u64, u64) -> Result<(), E>,
) -> Result<(), E> {
    if block.is_empty() {
        return Ok(());
    }
    let nd = block.ranges.len();
    // The innermost dimension is one run when it is contiguous in storage.
    let (outer, run_len) = match block.ranges.last() {
        Some(&(s, e)) if stride[nd - 1] == 1 => (nd - 1, (e - s) as u64),
        _ => (nd, 1),
    };
    let mut x: Vec<usize> = block.ranges.iter().map(|&(s, _)| s).collect();
    let mut pending: Option<(u64, u64)> = None;
    loop {
        let off: u64 = x.iter().zip(stride).map(|(&c, &s)| c as u64 * s).sum();
        pending = match pending {
            Some((o, l)) if o + l == off => Some((o, l + run_len)),
            Some((o, l)) => {
                f(o, l)?;
                Some((off, run_len))
            }
            None => Some((off, run_len)),
        };
        // Odometer over the outer dimensions, last fastest.
        let mut k = outer;
        loop {
            if k == 0 {
                if let Some((o, l)) = pending {
                    f(o, l)?;
                }
                return Ok(());
            }
            k -= 1;
            x[k] += 1;
            if x[k] < block.ranges[k].1 {
                break;
            }
            x[k] = block.ranges[k].0;
        }
    }
}

/// Checks, without reading any data, that the `.npy` file at `path` can hold input operand
/// `operand`: dtype `T`, C order, the operand's storage shape, and a file long enough. Ranks
/// that hold no block of an operand call this so that a bad file is reported on every rank.
pub fn check_operand_file<T: Scalar>(
    path: &Path,
    operand: &Operand,
    extents: &BTreeMap<Index, usize>,
) -> Result<NpyHeader, NpyError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    check_open::<T>(path, &mut f, operand, extents).map(|(h, _)| h)
}

/// Header, dtype, shape and length checks of an open file; returns the header and the
/// operand's storage shape.
fn check_open<T: Scalar>(
    path: &Path,
    f: &mut File,
    operand: &Operand,
    extents: &BTreeMap<Index, usize>,
) -> Result<(NpyHeader, Vec<usize>), NpyError> {
    let mut expected = Vec::with_capacity(operand.dims.len());
    for d in &operand.dims {
        expected.push(match d {
            Dim::Index(c) => *extents
                .get(c)
                .ok_or_else(|| invalid(path, format!("no extent for index '{c}'")))?,
            Dim::Broadcast => 1,
        });
    }
    let h = read_header_from(path, f)?;
    check_header::<T>(path, &h, &expected)?;
    let total = h
        .len()
        .ok_or_else(|| invalid(path, "element count overflows u64"))?;
    let need = total
        .checked_mul(T::BYTES as u64)
        .and_then(|b| b.checked_add(h.data_offset))
        .ok_or_else(|| invalid(path, "file size overflows u64"))?;
    let have = f.metadata().map_err(io_err(path))?.len();
    if have < need {
        return Err(format_err(
            path,
            format!("file is truncated: {have} bytes, the header promises {need}"),
        ));
    }
    Ok((h, expected))
}

/// Reads the block `block` (ranges over `operand.indices`, global coordinates) of input operand
/// `operand` from the `.npy` file at `path`, row-major over `operand.indices`.
///
/// The file must hold the operand's storage shape (`operand.shape(extents)`; broadcast
/// dimensions have extent 1) in dtype `T`, C order. Only the block's bytes are read, by seeking.
/// Diagonal storage dimensions (an index repeated in `operand.dims`) are read at equal
/// coordinates, broadcast dimensions at coordinate 0.
pub fn read_operand_block<T: Scalar>(
    path: &Path,
    operand: &Operand,
    extents: &BTreeMap<Index, usize>,
    block: &Block,
) -> Result<Vec<T>, NpyError> {
    if block.ranges.len() != operand.indices.len() {
        return Err(invalid(
            path,
            format!(
                "block has {} ranges but the operand has {} distinct indices",
                block.ranges.len(),
                operand.indices.len()
            ),
        ));
    }
    for (&(s, e), c) in block.ranges.iter().zip(&operand.indices) {
        let n = extents.get(c).copied().unwrap_or(0);
        if s > e || e > n {
            return Err(invalid(
                path,
                format!("block range {s}..{e} of index '{c}' is outside 0..{n}"),
            ));
        }
    }
    let mut f = File::open(path).map_err(io_err(path))?;
    let (h, expected) = check_open::<T>(path, &mut f, operand, extents)?;

    // Storage stride of each distinct index: a diagonal index advances all its storage dims.
    let sstride = strides(&expected).ok_or_else(|| invalid(path, "shape overflows u64"))?;
    let stride: Vec<u64> = operand
        .indices
        .iter()
        .map(|c| {
            operand
                .dims
                .iter()
                .zip(&sstride)
                .filter(|(d, _)| **d == Dim::Index(*c))
                .map(|(_, &s)| s)
                .sum()
        })
        .collect();

    let n = usize::try_from(block.len()).map_err(|_| invalid(path, "block too large"))?;
    let mut out: Vec<T> = Vec::with_capacity(n);
    let mut buf: Vec<u8> = Vec::new();
    let data = h.data_offset;
    for_each_run(&stride, block, |off, len| -> Result<(), NpyError> {
        let mut left = len as usize * T::BYTES;
        f.seek(SeekFrom::Start(data + off * T::BYTES as u64))
            .map_err(io_err(path))?;
        while left > 0 {
            let take = left.min(CHUNK_BYTES);
            buf.resize(take, 0);
            f.read_exact(&mut buf).map_err(io_err(path))?;
            T::from_bytes(&buf, &mut out);
            left -= take;
        }
        Ok(())
    })?;
    debug_assert_eq!(out.len(), n);
    Ok(out)
}

/// The `.npy` header (magic through padding) for a C-ordered array of `T` with `shape`:
/// version 1.0 when it fits, else 2.0, padded so the data starts on a 64-byte boundary.
pub fn header_bytes<T: Scalar>(shape: &[usize]) -> Vec<u8> {
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        T::NPY_DTYPE,
        fmt_shape(shape)
    );
    for (major, pre) in [(1u8, 10usize), (2u8, 12usize)] {
        let unpadded = pre + dict.len() + 1;
        let total = unpadded.div_ceil(64) * 64;
        let hlen = total - pre;
        if major == 1 && hlen > u16::MAX as usize {
            continue;
        }
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[major, 0]);
        if major == 1 {
            out.extend_from_slice(&(hlen as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(hlen as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out.resize(total - 1, b' ');
        out.push(b'\n');
        return out;
    }
    unreachable!("a version 2.0 header holds any shape that fits in memory")
}

/// True when `rank` is the one replica holder of its block that writes it: coordinate 0 along
/// every grid dimension that does not split the tensor.
fn is_writer(dist: &Distribution, rank: usize) -> bool {
    let Some(coords) = dist.grid.coords(rank) else {
        return false;
    };
    (0..dist.grid.dims.len())
        .filter(|g| !dist.split.iter().any(|s| s.contains(g)))
        .all(|g| coords[g] == 0)
}

/// Writes a distributed tensor of `shape`, laid out in `dist`, to the `.npy` file at `path`
/// (dtype `T`, C order). Collective: every rank of `comm` calls it with its own block `local`
/// (row-major, the block `dist.block(rank, shape)`; empty for ranks outside the grid).
///
/// Rank 0 creates the file, writes the header and sizes it; after an agreement (which doubles as
/// a barrier) each block is written at its offsets by exactly one replica holder; a final
/// agreement makes the file complete on return. An error on any rank is returned on every rank.
pub fn write_distributed<T: Scalar, C: Communicator>(
    path: &Path,
    comm: &C,
    shape: &[usize],
    dist: &Distribution,
    local: &[T],
) -> Result<(), NpyError> {
    let rank = comm.rank();
    let comm_err = |source| NpyError::Comm {
        path: path.to_path_buf(),
        source,
    };
    // Arguments are the same on every rank, so these checks fail everywhere or nowhere.
    if dist.split.len() != shape.len() {
        return Err(invalid(
            path,
            format!(
                "distribution has {} index splits but the tensor has {} dimensions",
                dist.split.len(),
                shape.len()
            ),
        ));
    }
    if dist.is_partial() {
        return Err(invalid(
            path,
            "cannot write a tensor that holds partial sums",
        ));
    }
    if dist.grid.size() > comm.size() {
        return Err(invalid(
            path,
            format!(
                "distribution needs {} ranks but the communicator has {}",
                dist.grid.size(),
                comm.size()
            ),
        ));
    }
    let stride = strides(shape).ok_or_else(|| invalid(path, "shape overflows u64"))?;
    let total = shape
        .iter()
        .try_fold(1u64, |a, &n| a.checked_mul(n as u64))
        .and_then(|n| n.checked_mul(T::BYTES as u64))
        .ok_or_else(|| invalid(path, "tensor size overflows u64"))?;
    let header = header_bytes::<T>(shape);

    // Phase 1: rank 0 writes the header and sizes the file.
    let mut mine: Result<(), NpyError> = Ok(());
    if rank == 0 {
        mine = (|| {
            let mut f = File::create(path).map_err(io_err(path))?;
            f.write_all(&header).map_err(io_err(path))?;
            f.set_len(header.len() as u64 + total)
                .map_err(io_err(path))?;
            Ok(())
        })();
    }
    agree(path, comm, &mine).map_err(|e| match e {
        Agreement::Comm(c) => comm_err(c),
        Agreement::Peer(r) => NpyError::PeerFailed {
            path: path.to_path_buf(),
            rank: r,
        },
    })?;
    mine?;

    // Phase 2: one replica holder per block writes it.
    let block = dist.block(rank, shape);
    let mut mine: Result<(), NpyError> = Ok(());
    if let Some(block) = block.filter(|_| is_writer(dist, rank)) {
        mine = (|| {
            if block.len() != local.len() as u64 {
                return Err(invalid(
                    path,
                    format!(
                        "rank {rank} holds {} elements but its block {} has {}",
                        local.len(),
                        fmt_shape(&block.shape()),
                        block.len()
                    ),
                ));
            }
            let mut f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_err(path))?;
            let data = header.len() as u64;
            let mut next = 0usize;
            let mut buf: Vec<u8> = Vec::new();
            for_each_run(&stride, &block, |off, len| -> Result<(), NpyError> {
                f.seek(SeekFrom::Start(data + off * T::BYTES as u64))
                    .map_err(io_err(path))?;
                let run = &local[next..next + len as usize];
                next += len as usize;
                for chunk in run.chunks(CHUNK_BYTES / T::BYTES) {
                    buf.clear();
                    T::extend_bytes(chunk, &mut buf);
                    f.write_all(&buf).map_err(io_err(path))?;
                }
                Ok(())
            })?;
            f.flush().map_err(io_err(path))?;
            Ok(())
        })();
    }
    agree(path, comm, &mine).map_err(|e| match e {
        Agreement::Comm(c) => comm_err(c),
        Agreement::Peer(r) => NpyError::PeerFailed {
            path: path.to_path_buf(),
            rank: r,
        },
    })?;
    mine
}

enum Agreement {
    Comm(CommError),
    Peer(usize),
}

/// All ranks learn whether some rank failed (an all-reduce of max(rank+1)), so no rank waits on
/// one that gave up. A rank that failed itself reports its own error, not the peer's.
fn agree<C: Communicator>(
    _path: &Path,
    comm: &C,
    mine: &Result<(), NpyError>,
) -> Result<(), Agreement> {
    let mut flag = [if mine.is_err() {
        comm.rank() as u64 + 1
    } else {
        0
    }];
    comm.all_reduce_max_u64(&mut flag)
        .map_err(Agreement::Comm)?;
    if flag[0] > 0 && mine.is_ok() {
        return Err(Agreement::Peer(flag[0] as usize - 1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use deinsum_plan::{Grid, GridDim};
    use ndarray::{ArrayD, Dimension, IxDyn};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier, Mutex};

    static COUNTER: AtomicUsize = AtomicUsize::new(0);

    /// A fresh temp file path, removed on drop.
    struct Tmp(PathBuf);
    impl Tmp {
        fn new(tag: &str) -> Tmp {
            let n = COUNTER.fetch_add(1, Ordering::SeqCst);
            let p = std::env::temp_dir()
                .join(format!("deinsum-npy-{}-{n}-{tag}.npy", std::process::id()));
            Tmp(p)
        }
    }
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn ramp(shape: &[usize]) -> ArrayD<f64> {
        let n: usize = shape.iter().product();
        ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|x| x as f64 * 0.5 - 3.0).collect())
            .unwrap()
    }

    fn ext(pairs: &[(char, usize)]) -> BTreeMap<Index, usize> {
        pairs.iter().copied().collect()
    }

    fn plain(idx: &str) -> Operand {
        Operand::new(idx.chars().map(Dim::Index).collect())
    }

    fn dist(split: Vec<Vec<usize>>, grid: &[(char, usize)]) -> Distribution {
        Distribution {
            grid: Grid {
                dims: grid
                    .iter()
                    .map(|&(index, size)| GridDim { index, size })
                    .collect(),
            },
            split,
            partial: Vec::new(),
            window: Vec::new(),
        }
    }

    /// The elements of `a` inside `block`, row-major (the oracle for block reads).
    fn slice_of(a: &ArrayD<f64>, block: &Block) -> Vec<f64> {
        let mut out = Vec::new();
        for (ix, &v) in a.indexed_iter() {
            let inside = ix
                .slice()
                .iter()
                .zip(&block.ranges)
                .all(|(&x, &(s, e))| s <= x && x < e);
            if inside {
                out.push(v);
            }
        }
        out
    }

    #[test]
    fn header_of_ndarray_npy_files() {
        for shape in [vec![], vec![7], vec![3, 4], vec![2, 3, 5]] {
            let t = Tmp::new("hdr");
            ndarray_npy::write_npy(&t.0, &ramp(&shape)).unwrap();
            let h = read_header(&t.0).unwrap();
            assert_eq!(h.descr, "<f8");
            assert!(!h.fortran_order);
            assert_eq!(h.shape, shape);
            assert_eq!(h.data_offset % 16, 0);
        }
        let t = Tmp::new("hdr32");
        let a32 = ramp(&[4, 2]).mapv(|x| x as f32);
        ndarray_npy::write_npy(&t.0, &a32).unwrap();
        let h = read_header(&t.0).unwrap();
        assert_eq!(
            (h.descr.as_str(), h.shape.as_slice()),
            ("<f4", &[4usize, 2][..])
        );
    }

    #[test]
    fn our_header_is_read_by_ndarray_npy() {
        for shape in [vec![], vec![1], vec![5], vec![2, 3], vec![3, 1, 4]] {
            let t = Tmp::new("ours");
            let a = ramp(&shape);
            let mut bytes = header_bytes::<f64>(&shape);
            assert_eq!(bytes.len() % 64, 0);
            f64::extend_bytes(a.as_slice().unwrap(), &mut bytes);
            std::fs::write(&t.0, &bytes).unwrap();
            let back: ArrayD<f64> = ndarray_npy::read_npy(&t.0).unwrap();
            assert_eq!(back, a);
        }
    }

    #[test]
    fn versions_two_and_three_headers() {
        for major in [2u8, 3u8] {
            let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&[major, 0]);
            let hlen = 128 - 12;
            bytes.extend_from_slice(&(hlen as u32).to_le_bytes());
            bytes.extend_from_slice(dict.as_bytes());
            bytes.resize(127, b' ');
            bytes.push(b'\n');
            let a = ramp(&[2, 3]);
            f64::extend_bytes(a.as_slice().unwrap(), &mut bytes);
            let t = Tmp::new("v23");
            std::fs::write(&t.0, &bytes).unwrap();
            let h = read_header(&t.0).unwrap();
            assert_eq!(h.version, (major, 0));
            assert_eq!(h.data_offset, 128);
            let blk = Block {
                ranges: vec![(1, 2), (0, 3)].into(),
            };
            let got: Vec<f64> =
                read_operand_block(&t.0, &plain("ij"), &ext(&[('i', 2), ('j', 3)]), &blk).unwrap();
            assert_eq!(got, slice_of(&a, &blk));
        }
    }

    #[test]
    fn every_block_of_uneven_distributions_matches_the_oracle() {
        // 5x7x3 on a 2x3x2 grid: ceil blocks are short or empty at the edges.
        let shape = [5usize, 7, 3];
        let a = ramp(&shape);
        let t = Tmp::new("blocks");
        ndarray_npy::write_npy(&t.0, &a).unwrap();
        let op = plain("ijk");
        let e = ext(&[('i', 5), ('j', 7), ('k', 3)]);
        let splits = [
            dist(
                vec![vec![0], vec![1], vec![2]],
                &[('i', 2), ('j', 3), ('k', 2)],
            ),
            dist(vec![vec![0], vec![], vec![1]], &[('i', 3), ('k', 4)]),
            dist(vec![vec![], vec![0, 1], vec![]], &[('j', 2), ('x', 3)]),
            dist(vec![vec![], vec![], vec![0]], &[('k', 3)]),
        ];
        for d in &splits {
            for r in 0..d.grid.size() {
                let blk = d.block(r, &shape).unwrap();
                let got: Vec<f64> = read_operand_block(&t.0, &op, &e, &blk).unwrap();
                assert_eq!(got, slice_of(&a, &blk), "block {blk:?}");
            }
        }
        // f32 files read as f32.
        let t32 = Tmp::new("blocks32");
        let a32 = a.mapv(|x| x as f32);
        ndarray_npy::write_npy(&t32.0, &a32).unwrap();
        let blk = splits[0].block(5, &shape).unwrap();
        let got: Vec<f32> = read_operand_block(&t32.0, &op, &e, &blk).unwrap();
        let want: Vec<f32> = slice_of(&a, &blk).into_iter().map(|x| x as f32).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn diagonal_and_broadcast_operands() {
        // "iij": storage (4,4,3), distinct indices (i,j), element a[i,i,j].
        let a = ramp(&[4, 4, 3]);
        let t = Tmp::new("diag");
        ndarray_npy::write_npy(&t.0, &a).unwrap();
        let op = Operand::new(vec![Dim::Index('i'), Dim::Index('i'), Dim::Index('j')]);
        assert_eq!(op.indices, vec!['i', 'j']);
        let e = ext(&[('i', 4), ('j', 3)]);
        let blk = Block {
            ranges: vec![(1, 4), (1, 3)].into(),
        };
        let got: Vec<f64> = read_operand_block(&t.0, &op, &e, &blk).unwrap();
        let mut want = Vec::new();
        for i in 1..4 {
            for j in 1..3 {
                want.push(a[[i, i, j].as_slice()]);
            }
        }
        assert_eq!(got, want);

        // "jij" puts the repeated index last: no contiguous run, still correct.
        let a = ramp(&[3, 4, 3]);
        let t = Tmp::new("diag2");
        ndarray_npy::write_npy(&t.0, &a).unwrap();
        let op = Operand::new(vec![Dim::Index('j'), Dim::Index('i'), Dim::Index('j')]);
        let blk = Block {
            ranges: vec![(0, 3), (2, 4)].into(),
        };
        let got: Vec<f64> = read_operand_block(&t.0, &op, &e, &blk).unwrap();
        let mut want = Vec::new();
        for j in 0..3 {
            for i in 2..4 {
                want.push(a[[j, i, j].as_slice()]);
            }
        }
        assert_eq!(got, want);

        // Broadcast dims: storage (1,5,1), distinct index i only.
        let a = ramp(&[1, 5, 1]);
        let t = Tmp::new("bcast");
        ndarray_npy::write_npy(&t.0, &a).unwrap();
        let op = Operand::new(vec![Dim::Broadcast, Dim::Index('i'), Dim::Broadcast]);
        let e = ext(&[('i', 5)]);
        let blk = Block {
            ranges: vec![(2, 5)].into(),
        };
        let got: Vec<f64> = read_operand_block(&t.0, &op, &e, &blk).unwrap();
        assert_eq!(
            got,
            vec![
                a[[0, 2, 0].as_slice()],
                a[[0, 3, 0].as_slice()],
                a[[0, 4, 0].as_slice()]
            ]
        );

        // A scalar operand.
        let a = ramp(&[]);
        let t = Tmp::new("scalar");
        ndarray_npy::write_npy(&t.0, &a).unwrap();
        let got: Vec<f64> = read_operand_block(
            &t.0,
            &plain(""),
            &ext(&[]),
            &Block {
                ranges: vec![].into(),
            },
        )
        .unwrap();
        assert_eq!(got, vec![-3.0]);
    }

    #[test]
    fn wrong_shape_dtype_order_and_truncation_are_named() {
        let a = ramp(&[3, 4]);
        let t = Tmp::new("wrong");
        ndarray_npy::write_npy(&t.0, &a).unwrap();
        let name = t.0.display().to_string();
        let blk = Block {
            ranges: vec![(0, 1), (0, 1)].into(),
        };
        let err = read_operand_block::<f64>(&t.0, &plain("ij"), &ext(&[('i', 3), ('j', 5)]), &blk)
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, NpyError::Shape { .. }));
        assert!(
            msg.contains(&name)
                && msg.contains("expected shape (3, 5)")
                && msg.contains("found (3, 4)"),
            "{msg}"
        );

        let err = read_operand_block::<f32>(&t.0, &plain("ij"), &ext(&[('i', 3), ('j', 4)]), &blk)
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&name) && msg.contains("expected dtype <f4, found <f8"),
            "{msg}"
        );

        // Fortran order: ndarray-npy writes a transposed view as fortran_order True.
        let tf = Tmp::new("fortran");
        ndarray_npy::write_npy(&tf.0, &a.t()).unwrap();
        assert!(read_header(&tf.0).unwrap().fortran_order);
        let err = read_operand_block::<f64>(&tf.0, &plain("ij"), &ext(&[('i', 4), ('j', 3)]), &blk)
            .unwrap_err();
        assert!(matches!(err, NpyError::FortranOrder { .. }), "{err}");
        assert!(err.to_string().contains("Fortran order"));

        // Truncated data and garbage files.
        let mut bytes = std::fs::read(&t.0).unwrap();
        bytes.truncate(bytes.len() - 8);
        let tt = Tmp::new("trunc");
        std::fs::write(&tt.0, &bytes).unwrap();
        let err = read_operand_block::<f64>(&tt.0, &plain("ij"), &ext(&[('i', 3), ('j', 4)]), &blk)
            .unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        let tg = Tmp::new("garbage");
        std::fs::write(&tg.0, b"hello world, not npy").unwrap();
        assert!(matches!(read_header(&tg.0), Err(NpyError::Format { .. })));
        let missing = std::env::temp_dir().join("deinsum-npy-does-not-exist.npy");
        let err = read_header(&missing).unwrap_err();
        assert!(err.to_string().contains("deinsum-npy-does-not-exist.npy"));

        // A block outside the array.
        let bad = Block {
            ranges: vec![(0, 4), (0, 1)].into(),
        };
        let err = read_operand_block::<f64>(&t.0, &plain("ij"), &ext(&[('i', 3), ('j', 4)]), &bad)
            .unwrap_err();
        assert!(matches!(err, NpyError::Invalid { .. }));
    }

    #[test]
    fn header_literal_parser() {
        let v = Literal::parse("{'descr': \"<f8\", 'fortran_order': False, 'shape': (3L, 4,), }")
            .unwrap();
        assert_eq!(
            v,
            Literal::Dict(vec![
                ("descr".into(), Literal::Str("<f8".into())),
                ("fortran_order".into(), Literal::Bool(false)),
                (
                    "shape".into(),
                    Literal::Tuple(vec![Literal::Int(3), Literal::Int(4)])
                ),
            ])
        );
        assert!(Literal::parse("{'descr': '<f8'").is_err());
        assert!(Literal::parse("{'shape': (99999999999999999999999,)}").is_err());
        assert!(Literal::parse("{'a': 1} trailing").is_err());
    }

    /// A test-only communicator over threads supporting what `write_distributed` uses.
    struct ThreadComm {
        rank: usize,
        size: usize,
        barrier: Arc<Barrier>,
        slot: Arc<Mutex<Vec<u64>>>,
    }

    impl ThreadComm {
        fn world(size: usize) -> Vec<ThreadComm> {
            let barrier = Arc::new(Barrier::new(size));
            let slot = Arc::new(Mutex::new(vec![0u64; size]));
            (0..size)
                .map(|rank| ThreadComm {
                    rank,
                    size,
                    barrier: barrier.clone(),
                    slot: slot.clone(),
                })
                .collect()
        }
    }

    fn unsupported<T>() -> Result<T, CommError> {
        Err(CommError::Invalid(
            "not supported by the npy test communicator".into(),
        ))
    }

    impl Communicator for ThreadComm {
        fn rank(&self) -> usize {
            self.rank
        }
        fn size(&self) -> usize {
            self.size
        }
        fn split(&self, _: usize, _: usize) -> Result<Self, CommError> {
            unsupported()
        }
        fn all_to_all_v(&self, _: &[u8], _: &[usize]) -> Result<(Vec<u8>, Vec<usize>), CommError> {
            unsupported()
        }
        fn all_reduce_sum_f64(&self, _: &mut [f64]) -> Result<(), CommError> {
            unsupported()
        }
        fn all_reduce_sum_f32(&self, _: &mut [f32]) -> Result<(), CommError> {
            unsupported()
        }
        fn all_reduce_max_u64(&self, buf: &mut [u64]) -> Result<(), CommError> {
            assert_eq!(buf.len(), 1, "test communicator reduces one word");
            self.slot.lock().unwrap()[self.rank] = buf[0];
            self.barrier.wait();
            buf[0] = *self.slot.lock().unwrap().iter().max().unwrap();
            self.barrier.wait();
            Ok(())
        }
        fn reduce_scatter_sum_f64(&self, _: &[f64], _: &[usize]) -> Result<Vec<f64>, CommError> {
            unsupported()
        }
        fn broadcast(&self, _: &mut Vec<u8>, _: usize) -> Result<(), CommError> {
            unsupported()
        }
        fn barrier(&self) -> Result<(), CommError> {
            self.barrier.wait();
            Ok(())
        }
        fn traffic(&self) -> crate::comm::Traffic {
            crate::comm::Traffic::default()
        }
    }

    /// Every rank writes its block of `a` in `d`; returns each rank's result.
    fn write_all(
        path: &Path,
        procs: usize,
        a: &ArrayD<f64>,
        d: &Distribution,
    ) -> Vec<Result<(), String>> {
        let shape = a.shape().to_vec();
        std::thread::scope(|s| {
            let hs: Vec<_> = ThreadComm::world(procs)
                .into_iter()
                .map(|c| {
                    let shape = shape.clone();
                    s.spawn(move || {
                        let local = match d.block(c.rank, &shape) {
                            Some(b) => slice_of(a, &b),
                            None => Vec::new(),
                        };
                        write_distributed(path, &c, &shape, d, &local).map_err(|e| e.to_string())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn distributed_write_matches_ndarray_npy_reader() {
        let cases: Vec<(Vec<usize>, Distribution, usize)> = vec![
            // Uneven blocks with a replicated grid dim (only coordinate 0 writes).
            (
                vec![5, 7],
                dist(vec![vec![0], vec![2]], &[('i', 2), ('k', 2), ('j', 3)]),
                13,
            ),
            (
                vec![7, 3, 4],
                dist(vec![vec![1], vec![], vec![0]], &[('k', 3), ('i', 2)]),
                6,
            ),
            (vec![9], dist(vec![vec![0, 1]], &[('i', 2), ('x', 2)]), 5),
            (vec![4, 4], Distribution::on_root(2), 3),
            (vec![], Distribution::on_root(0), 2),
            (
                vec![2, 3],
                dist(vec![vec![0], vec![1]], &[('i', 3), ('j', 4)]),
                12,
            ),
        ];
        for (shape, d, procs) in cases {
            let a = ramp(&shape);
            let t = Tmp::new("wr");
            let res = write_all(&t.0, procs, &a, &d);
            assert!(res.iter().all(|r| r.is_ok()), "{res:?}");
            let back: ArrayD<f64> = ndarray_npy::read_npy(&t.0).unwrap();
            assert_eq!(back, a, "shape {shape:?} dist {d:?}");
        }
    }

    #[test]
    fn distributed_write_errors_reach_every_rank() {
        let a = ramp(&[4, 4]);
        let mut d = dist(vec![vec![0], vec![]], &[('i', 2), ('k', 2)]);
        d.partial = vec![1];
        let t = Tmp::new("partial");
        let res = write_all(&t.0, 4, &a, &d);
        assert!(res
            .iter()
            .all(|r| r.as_ref().unwrap_err().contains("partial sums")));

        // An unwritable path: rank 0 fails creating it, the others hear of it.
        let bad = std::env::temp_dir()
            .join("deinsum-no-such-dir")
            .join("x.npy");
        let d = dist(vec![vec![0], vec![]], &[('i', 2)]);
        let res = write_all(&bad, 3, &a, &d);
        assert!(res[0].as_ref().unwrap_err().contains("x.npy"));
        for r in &res[1..] {
            assert!(r.as_ref().unwrap_err().contains("rank 0 failed"), "{r:?}");
        }
    }
}
