//! The `.npy` header: reading and checking it, and writing one for a C-ordered array.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::dtype::ElemType;
use super::literal::Literal;
use super::{fmt_shape, format_err, io_err, NpyError, NpyHeader, MAGIC};
use crate::scalar::Scalar;

/// Largest header accepted (a sane dictionary is a few hundred bytes).
const MAX_HEADER: usize = 1 << 20;

/// Reads and parses the header of the `.npy` file at `path` (nothing beyond the header is read).
pub fn read_header(path: &Path) -> Result<NpyHeader, NpyError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    read_header_from(path, &mut f)
}

pub(super) fn read_header_from(path: &Path, f: &mut File) -> Result<NpyHeader, NpyError> {
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
                expected: "a float, complex, integer or bool dtype".into(),
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

/// Checks the header against the expected shape and returns its element type: `T` itself, or
/// a numeric type (integer, bool, the other float, either byte order) converted on reading.
pub(super) fn check_header(
    path: &Path,
    h: &NpyHeader,
    expected: &[usize],
) -> Result<ElemType, NpyError> {
    let elem = ElemType::parse(&h.descr).ok_or_else(|| NpyError::Dtype {
        path: path.to_path_buf(),
        expected: "a float, complex, integer or bool dtype".into(),
        found: h.descr.clone(),
    })?;
    if h.shape != expected {
        return Err(NpyError::Shape {
            path: path.to_path_buf(),
            expected: expected.to_vec(),
            found: h.shape.clone(),
        });
    }
    Ok(elem)
}

/// The `.npy` header (magic through padding) for a C-ordered array of `T` with `shape`:
/// version 1.0 when it fits, else 2.0, padded so the data starts on a 64-byte boundary.
pub fn header_bytes<T: Scalar>(shape: &[usize]) -> Vec<u8> {
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        T::DTYPE.npy_descr(),
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
