//! `deinsum run --inputs`: the operand files as a user has them. Extents come from their
//! headers when no extent flag is given, and every file is checked (exists, is a file, holds
//! the operand's shape in a numeric dtype) before any rank moves data, so a bad file is an
//! input error (exit 2) named once.

use super::InputError;
use deinsum_exec::npy::{fmt_shape, read_header, NpyHeader};
use deinsum_exec::{with_dtype, DType};
use deinsum_expr::{Dim, ExtentSpec, Index, ParsedEinsum};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Splits the `--inputs` list: items trimmed (as `--sizes` is), an empty item named by its
/// position.
pub fn parse_list(raw: &str) -> Result<Vec<PathBuf>, InputError> {
    let items: Vec<&str> = raw.split(',').map(str::trim).collect();
    if let Some(k) = items.iter().position(|s| s.is_empty()) {
        return Err(InputError(format!(
            "--inputs: item {} of {} is empty (in {raw:?}); give one .npy file per operand, \
             separated by commas",
            k + 1,
            items.len()
        )));
    }
    Ok(items.into_iter().map(PathBuf::from).collect())
}

/// Reads the header of input file `path`, saying plainly when it is a directory or missing.
pub fn header_of(path: &Path) -> Result<NpyHeader, InputError> {
    if path.is_dir() {
        return Err(InputError(format!(
            "{}: is a directory, not a .npy file",
            path.display()
        )));
    }
    read_header(path).map_err(|e| InputError(e.to_string()))
}

/// The einsum `expr` with its extents taken from the headers of `paths` (one per operand), as
/// NumPy's einsum takes them from its arrays. An index with two different extents (neither 1,
/// which broadcasts) is refused naming both files and the index.
pub fn einsum_from_files(expr: &str, paths: &[PathBuf]) -> anyhow::Result<ParsedEinsum> {
    let headers = paths
        .iter()
        .map(|p| header_of(p))
        .collect::<Result<Vec<_>, _>>()?;
    let shapes: Vec<Vec<usize>> = headers.iter().map(|h| h.shape.clone()).collect();
    // The operands' subscripts, from a parse with placeholder extents (an expression with `...`
    // needs the shapes to parse at all; the parse below then names any mismatch).
    let probe = ExtentSpec {
        default: Some(1),
        ..ExtentSpec::default()
    };
    if let Ok(e) = deinsum_expr::parse(expr, &probe) {
        if e.inputs().len() != paths.len() {
            return Err(InputError(format!(
                "--inputs names {} files for {} operands",
                paths.len(),
                e.inputs().len()
            ))
            .into());
        }
        check_consistent(&e, paths, &shapes)?;
    }
    let spec = ExtentSpec {
        shapes: Some(shapes),
        ..ExtentSpec::default()
    };
    deinsum_expr::parse(expr, &spec).map_err(|err| {
        anyhow::Error::new(InputError(format!(
            "the shapes of the --inputs files do not fit {expr:?}: {err}"
        )))
    })
}

/// Refuses an operand whose file has another number of dimensions, and an index two files
/// give different extents (other than 1), naming both files, axes and extents.
fn check_consistent(
    e: &ParsedEinsum,
    paths: &[PathBuf],
    shapes: &[Vec<usize>],
) -> Result<(), InputError> {
    let mut seen: BTreeMap<Index, (usize, usize, usize)> = BTreeMap::new();
    for (k, op) in e.inputs().iter().enumerate() {
        let shape = &shapes[k];
        if shape.len() != op.dims.len() {
            return Err(InputError(format!(
                "{} holds a {}-dimensional array of shape {}, but operand {} ('{}') has {} \
                 dimensions",
                paths[k].display(),
                shape.len(),
                fmt_shape(shape),
                k + 1,
                e.input_subscripts(k),
                op.dims.len()
            )));
        }
        for (axis, d) in op.dims.iter().enumerate() {
            let Dim::Index(c) = d else { continue };
            let n = shape[axis];
            match seen.get(c) {
                Some(&(k0, a0, n0)) if n0 != n && n0 != 1 && n != 1 => {
                    return Err(InputError(format!(
                        "index '{c}' has extent {n0} in {} (axis {a0}) but {n} in {} (axis {axis})",
                        paths[k0].display(),
                        paths[k].display()
                    )));
                }
                Some(&(_, _, n0)) if n0 != 1 => {}
                _ => {
                    seen.insert(*c, (k, axis, n));
                }
            }
        }
    }
    Ok(())
}

/// Checks every input file against its operand before any rank reads data: exists, is a
/// file, holds the operand's shape in a numeric dtype, and is long enough. Returns one note per
/// file whose dtype is converted to the run's, `dtype`.
pub fn check_files(
    e: &ParsedEinsum,
    paths: &[PathBuf],
    dtype: DType,
) -> Result<Vec<String>, InputError> {
    if paths.len() != e.inputs().len() {
        return Err(InputError(format!(
            "--inputs names {} files for {} operands",
            paths.len(),
            e.inputs().len()
        )));
    }
    let mut notes = Vec::new();
    for (k, p) in paths.iter().enumerate() {
        header_of(p)?;
        let h = with_dtype!(dtype, T => {
            deinsum_exec::npy::check_operand_file::<T>(p, &e.inputs()[k], e.extents())
        })
        .map_err(|err| InputError(err.to_string()))?;
        let Some(elem) = h.elem_type() else { continue };
        if !elem.is_dtype(dtype) {
            let to = dtype.numpy_name();
            notes.push(format!(
                "note: {} holds {}; converted to {to} as numpy's astype({to}) does",
                p.display(),
                elem.name()
            ));
        }
    }
    Ok(notes)
}

/// Refuses an `--output` that is one of the inputs (it would be overwritten while, or before,
/// being read).
pub fn check_output(output: &Path, inputs: &[PathBuf]) -> Result<(), InputError> {
    let Ok(out) = output.canonicalize() else {
        // A file that does not exist yet is no input.
        return Ok(());
    };
    for p in inputs {
        if p.canonicalize().is_ok_and(|q| q == out) {
            return Err(InputError(format!(
                "--output {} is also an input (--inputs {}); write the result to another file",
                output.display(),
                p.display()
            )));
        }
    }
    Ok(())
}

/// Refuses an `--output` that cannot be created: a directory, or a file in a directory that
/// does not exist (found before the run, rather than as a failed write on some rank).
pub fn check_output_path(output: &Path) -> Result<(), InputError> {
    if output.is_dir() {
        return Err(InputError(format!(
            "--output {}: is a directory; name a file",
            output.display()
        )));
    }
    let parent = output.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(dir) = parent {
        if !dir.is_dir() {
            return Err(InputError(format!(
                "--output {}: the directory {} does not exist",
                output.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Refuses an `--output` of a run without a sparse operand that is not a `.npy` file: its ranks
/// write their own blocks of one dense array, and a coordinate file (`.mtx`, `.tns`, `.npz`)
/// would need the whole result on one rank.
pub(super) fn check_dense_output_format(out: &std::path::Path) -> Result<(), InputError> {
    use deinsum_sparse::io::OutputFormat;
    match OutputFormat::of(out) {
        Ok(OutputFormat::Npy) => Ok(()),
        Ok(_) => Err(InputError(format!(
            "--output {}: .mtx, .tns and .npz are written for runs with a sparse operand; this einsum's result is dense and its ranks write their blocks of a .npy file",
            out.display()
        ))),
        Err(e) => Err(InputError(format!("--output {e}"))),
    }
}
