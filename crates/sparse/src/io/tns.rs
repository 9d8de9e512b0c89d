//! FROSTT `.tns` files: one nonzero a line, its 1-based coordinates then its value; `#`
//! starts a comment.

use super::{one_based, parse_err, read_text, value};
use crate::{SparseError, SparseTensor};
use deinsum_exec::Scalar;
use std::path::Path;

/// Reads a FROSTT file. The order is the first entry's field count minus one; without
/// `shape`, each extent is the largest coordinate of its mode (the file has no header).
pub fn read_tns<T: Scalar>(
    path: &Path,
    shape: Option<&[usize]>,
) -> Result<SparseTensor<T>, SparseError> {
    let text = read_text(path)?;
    let mut order: Option<usize> = None;
    let mut coords: Vec<usize> = Vec::new();
    let mut vals: Vec<T> = Vec::new();
    for (no, l) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
        let l = l.split('#').next().unwrap_or("").trim();
        if l.is_empty() {
            continue;
        }
        let toks: Vec<&str> = l.split_whitespace().collect();
        let o = *order.get_or_insert(toks.len().saturating_sub(1));
        if o == 0 {
            return Err(parse_err(
                path,
                no,
                "entry",
                "a nonzero needs coordinates and a value",
            ));
        }
        if let Some(s) = shape {
            if s.len() != o {
                return Err(parse_err(
                    path,
                    no,
                    "entry",
                    format!("{o} coordinates, but the operand has {} modes", s.len()),
                ));
            }
        }
        if toks.len() != o + 1 {
            return Err(parse_err(
                path,
                no,
                "entry",
                format!("{} fields, the first entry had {}", toks.len(), o + 1),
            ));
        }
        for (mode, t) in toks[..o].iter().enumerate() {
            let ext = shape.map_or(0, |s| s[mode]);
            coords.push(one_based(
                path,
                no,
                &format!("index of mode {mode}"),
                Some(t),
                ext,
            )?);
        }
        vals.push(T::from_f64(value(path, no, Some(toks[o]))?));
    }
    let o = order.ok_or_else(|| SparseError::Format {
        file: path.display().to_string(),
        message: "has no nonzeros (its order and shape cannot be known)".into(),
    })?;
    let shape = match shape {
        Some(s) => s.to_vec(),
        None => (0..o)
            .map(|m| coords.iter().skip(m).step_by(o).max().map_or(1, |&x| x + 1))
            .collect(),
    };
    SparseTensor::from_entries(shape, coords, vals)
}
