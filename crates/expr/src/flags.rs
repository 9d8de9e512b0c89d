//! Parsers for the extent flags: `--sizes i=64,j=32`, `--size N`, `--shapes 64x32,32x16`.

use crate::{ExprError, ExtentSpec, Index};
use std::collections::BTreeMap;

impl ExtentSpec {
    /// Builds a spec from the flag strings of `--sizes`, `--size` and `--shapes` (each
    /// optional). Extents are positive decimal integers that fit in `usize`.
    ///
    /// `--sizes`: comma-separated `INDEX=N` (an empty string names nothing); `--size`: one
    /// `N`; `--shapes`: comma-separated shapes, one per operand, each `AxBx...` (an empty
    /// shape is a scalar operand). Whitespace around items is ignored.
    pub fn from_flags(
        sizes: Option<&str>,
        size: Option<&str>,
        shapes: Option<&str>,
    ) -> Result<ExtentSpec, ExprError> {
        Ok(ExtentSpec {
            sizes: match sizes {
                Some(s) => parse_sizes(s)?,
                None => BTreeMap::new(),
            },
            default: match size {
                Some(s) => Some(parse_extent(s.trim(), "--size")?),
                None => None,
            },
            shapes: match shapes {
                Some(s) => Some(parse_shapes(s)?),
                None => None,
            },
        })
    }
}

/// Parses `i=64,j=32`.
pub fn parse_sizes(s: &str) -> Result<BTreeMap<Index, usize>, ExprError> {
    let mut out = BTreeMap::new();
    if s.trim().is_empty() {
        return Ok(out);
    }
    for entry in s.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(ExprError::invalid(
                "--sizes: empty entry (expected INDEX=N, such as i=64)",
            ));
        }
        let Some((name, value)) = entry.split_once('=') else {
            return Err(ExprError::invalid(format!(
                "--sizes: {entry:?} is not of the form INDEX=N (such as i=64)"
            )));
        };
        let name = name.trim();
        let mut chars = name.chars();
        let c = match (chars.next(), chars.next()) {
            (Some(c), None) if crate::is_index(c) => c,
            _ => {
                return Err(ExprError::invalid(format!(
                    "--sizes: {name:?} is not an index (an index is one character: {})",
                    crate::INDEX_RULE
                )))
            }
        };
        let n = parse_extent(value.trim(), &format!("--sizes: index '{c}'"))?;
        if out.insert(c, n).is_some() {
            return Err(ExprError::invalid(format!(
                "--sizes: index '{c}' is given twice"
            )));
        }
    }
    Ok(out)
}

/// Parses `64x32,32x16` (an empty shape is a scalar).
pub fn parse_shapes(s: &str) -> Result<Vec<Vec<usize>>, ExprError> {
    s.split(',')
        .enumerate()
        .map(|(k, shape)| {
            let shape = shape.trim();
            if shape.is_empty() {
                return Ok(Vec::new());
            }
            shape
                .split('x')
                .map(|d| parse_extent(d.trim(), &format!("--shapes: shape {k} ({shape:?})")))
                .collect()
        })
        .collect()
}

/// A non-negative decimal integer that fits in `usize` (0 included: NumPy's empty arrays);
/// `what` names the flag in the error.
pub fn parse_extent(s: &str, what: &str) -> Result<usize, ExprError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ExprError::invalid(format!(
            "{what}: {s:?} is not an extent (expected a non-negative integer)"
        )));
    }
    match s.parse::<usize>() {
        Ok(n) => Ok(n),
        Err(_) => Err(ExprError::invalid(format!(
            "{what}: extent {s} is too large (at most {})",
            usize::MAX
        ))),
    }
}
