//! Matrix Market coordinate files: `real`, `integer`, `pattern` or `complex` entries,
//! `general`, `symmetric`, `skew-symmetric` or (complex) `hermitian` storage.

use super::{one_based, parse_err, read_text, value};
use crate::{SparseError, SparseTensor};
use deinsum_exec::Scalar;
use std::path::Path;

/// How the stored triangle expands.
#[derive(Clone, Copy, PartialEq)]
enum Symmetry {
    General,
    Symmetric,
    Skew,
    /// Mirrored conjugated (complex files only).
    Hermitian,
}

/// What an entry holds after its indices.
#[derive(Clone, Copy, PartialEq)]
enum Field {
    /// One number.
    Real,
    /// Nothing: the entry is 1.
    Pattern,
    /// Two numbers, the real and imaginary parts.
    Complex,
}

/// Reads a Matrix Market coordinate file (1-based entries; a `pattern` entry is 1; a
/// symmetric file stores one triangle and is mirrored, conjugated when hermitian; duplicates
/// are summed). A `complex` file is refused for a real `T` (its imaginary parts would be
/// dropped, which NumPy refuses too).
pub fn read_mtx<T: Scalar>(path: &Path) -> Result<SparseTensor<T>, SparseError> {
    let text = read_text(path)?;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let (_, head) = lines
        .next()
        .ok_or_else(|| parse_err(path, 1, "header", "the file is empty"))?;
    let (field, sym) = header(path, head)?;
    if field == Field::Complex && !T::DTYPE.is_complex() {
        return Err(parse_err(
            path,
            1,
            "header",
            format!(
                "field 'complex' cannot be read as {} (it would drop the imaginary parts): \
                 use --dtype {}",
                T::DTYPE,
                T::DTYPE.complex()
            ),
        ));
    }
    let (size_no, m, n, declared) = size_line(path, &mut lines)?;
    if sym != Symmetry::General && m != n {
        return Err(parse_err(
            path,
            size_no,
            "size line",
            "a symmetric matrix must be square",
        ));
    }
    let mut coords = Vec::with_capacity(2 * declared);
    let mut vals: Vec<T> = Vec::with_capacity(declared);
    let mut count = 0usize;
    let mut last = size_no;
    for (no, l) in lines {
        let l = l.trim();
        if l.is_empty() || l.starts_with('%') {
            continue;
        }
        last = no;
        count += 1;
        if count > declared {
            return Err(parse_err(
                path,
                no,
                "entries",
                format!("more entries than the {declared} the size line declares"),
            ));
        }
        let mut tok = l.split_whitespace();
        let i = one_based(path, no, "row index", tok.next(), m)?;
        let j = one_based(path, no, "column index", tok.next(), n)?;
        let (re, im) = match field {
            Field::Pattern => (1.0, 0.0),
            Field::Real => (value(path, no, tok.next())?, 0.0),
            Field::Complex => (value(path, no, tok.next())?, value(path, no, tok.next())?),
        };
        if tok.next().is_some() {
            return Err(parse_err(path, no, "entry", "too many fields"));
        }
        if sym != Symmetry::General && j > i {
            return Err(parse_err(
                path,
                no,
                "entry",
                "a symmetric file stores the lower triangle only",
            ));
        }
        if sym == Symmetry::Skew && i == j {
            return Err(parse_err(
                path,
                no,
                "entry",
                "a skew-symmetric matrix has a zero diagonal",
            ));
        }
        coords.extend([i, j]);
        vals.push(T::from_parts(re, im));
        if sym != Symmetry::General && i != j {
            coords.extend([j, i]);
            vals.push(match sym {
                Symmetry::Skew => T::from_parts(-re, -im),
                Symmetry::Hermitian => T::from_parts(re, -im),
                _ => T::from_parts(re, im),
            });
        }
    }
    if count != declared {
        return Err(parse_err(
            path,
            last + 1,
            "entries",
            format!("the size line declares {declared} entries, the file has {count} (truncated?)"),
        ));
    }
    SparseTensor::from_entries(vec![m, n], coords, vals)
}

/// Parses the banner `%%MatrixMarket matrix coordinate <field> <symmetry>`.
fn header(path: &Path, head: &str) -> Result<(Field, Symmetry), SparseError> {
    let w: Vec<String> = head
        .split_whitespace()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    if w.first().map(String::as_str) != Some("%%matrixmarket") || w.len() != 5 {
        return Err(parse_err(
            path,
            1,
            "header",
            "expected '%%MatrixMarket matrix coordinate <field> <symmetry>'",
        ));
    }
    if w[1] != "matrix" {
        return Err(parse_err(
            path,
            1,
            "header",
            format!("object '{}' is not 'matrix'", w[1]),
        ));
    }
    if w[2] != "coordinate" {
        return Err(parse_err(
            path,
            1,
            "header",
            format!(
                "format '{}': only sparse 'coordinate' files are read (give a dense array as .npy)",
                w[2]
            ),
        ));
    }
    let field = match w[3].as_str() {
        "real" | "integer" | "double" => Field::Real,
        "pattern" => Field::Pattern,
        "complex" => Field::Complex,
        f => {
            return Err(parse_err(
                path,
                1,
                "header",
                format!("field '{f}' is not supported (real, integer, pattern or complex)"),
            ))
        }
    };
    let sym = match w[4].as_str() {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        "skew-symmetric" => Symmetry::Skew,
        "hermitian" if field == Field::Complex => Symmetry::Hermitian,
        s => {
            return Err(parse_err(
                path,
                1,
                "header",
                format!(
                    "symmetry '{s}' is not supported (general, symmetric, skew-symmetric, or \
                     hermitian for a complex field)"
                ),
            ))
        }
    };
    Ok((field, sym))
}

/// Parses the size line `rows cols entries`: the first line after the banner that is neither a
/// comment nor blank. Returns its line number and the three counts.
fn size_line<'a>(
    path: &Path,
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
) -> Result<(usize, usize, usize, usize), SparseError> {
    // The size line is the first that is neither a comment nor blank.
    let (size_no, size_line) = lines
        .find(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('%'))
        .ok_or_else(|| {
            parse_err(
                path,
                2,
                "size line",
                "missing (expected 'rows cols entries')",
            )
        })?;
    let dims: Vec<&str> = size_line.split_whitespace().collect();
    let num = |k: usize, what: &str| -> Result<usize, SparseError> {
        let t = dims
            .get(k)
            .ok_or_else(|| parse_err(path, size_no, "size line", format!("missing {what}")))?;
        t.parse().map_err(|_| {
            parse_err(
                path,
                size_no,
                "size line",
                format!("{what} '{t}' is not a count"),
            )
        })
    };
    let (m, n, declared) = (num(0, "rows")?, num(1, "columns")?, num(2, "entries")?);
    if dims.len() > 3 {
        return Err(parse_err(
            path,
            size_no,
            "size line",
            "more than three numbers",
        ));
    }
    if m == 0 || n == 0 {
        return Err(parse_err(
            path,
            size_no,
            "size line",
            "a matrix needs rows and columns",
        ));
    }
    Ok((size_no, m, n, declared))
}
