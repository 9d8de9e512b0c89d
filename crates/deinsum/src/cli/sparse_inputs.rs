//! The inputs of a sparse `deinsum run`: which operands are sparse, the extents from the
//! flags and the input files' shapes, the sparse operands read or generated, the dense ones
//! read from `.npy` or generated from the seed.

use super::run_args::Args;
use super::InputError;
use deinsum_exec::Scalar;
use deinsum_expr::Index;
use deinsum_sparse::einsum::{DenseOperand, SparseJob};
use deinsum_sparse::{gen, io, SparseError, SparseTensor};
use std::path::PathBuf;

/// A sparse error the user's input caused (exit 2).
pub(super) fn input_err(e: SparseError) -> anyhow::Error {
    InputError(e.to_string()).into()
}

/// The `--inputs` files.
pub(super) fn input_files(args: &Args) -> Vec<PathBuf> {
    let list = args.inputs.as_deref().unwrap_or_default().split(',');
    list.map(|s| PathBuf::from(s.trim()))
        .filter(|p| !p.as_os_str().is_empty())
        .collect()
}

/// The sparse operands: `--sparse`, the operands whose input file is sparse, else operand 0.
pub(super) fn sparse_set(args: &Args, n_inputs: usize) -> anyhow::Result<Vec<usize>> {
    let files = input_files(args);
    let mut set: Vec<usize> = args.sparse.clone();
    set.extend((0..files.len()).filter(|&k| io::is_sparse_file(&files[k])));
    if set.is_empty() {
        set.push(0);
    }
    set.sort_unstable();
    set.dedup();
    if let Some(&k) = set.iter().find(|&&k| k >= n_inputs) {
        return Err(InputError(format!("--sparse {k}: the einsum has {n_inputs} operands")).into());
    }
    if let Some(k) = (0..files.len()).find(|k| !io::is_sparse_file(&files[*k]) && set.contains(k)) {
        return Err(InputError(format!(
            "operand {k} is sparse but its input {} is not a .mtx, .tns or .npz file",
            files[k].display()
        ))
        .into());
    }
    // Operands past the list are generated (so a single sparse file may stand alone).
    if files.len() > n_inputs {
        let n = files.len();
        return Err(InputError(format!("--inputs names {n} files for {n_inputs} operands")).into());
    }
    Ok(set)
}

/// Sparse operand `k` of `shape`: its file already read (a FROSTT file whose shape the einsum
/// gives is read again within that shape, since the file carries none), or generated from
/// `--density` / `--rmat` with the seed plus `k` (so two generated operands differ).
fn sparse_operand<T: Scalar>(
    args: &Args,
    k: usize,
    shape: &[usize],
    read: Option<(PathBuf, SparseTensor<T>)>,
) -> anyhow::Result<SparseTensor<T>> {
    if let Some((p, t)) = read {
        if t.shape() != shape && p.extension().is_some_and(|e| e == "tns") {
            return io::read::<T>(&p, Some(shape)).map_err(input_err);
        }
        return io::check_shape(&p, t, shape).map_err(input_err);
    }
    let seed = args.seed.wrapping_add(k as u64);
    let t = match (args.density, args.rmat) {
        (Some(_), Some(_)) => {
            return Err(InputError("give --density or --rmat, not both".into()).into())
        }
        (None, Some(s)) => {
            let n = 1usize.checked_shl(s).unwrap_or(0);
            if shape != [n, n] {
                return Err(InputError(format!(
                    "--rmat {s} makes a {n} x {n} matrix; the einsum gives operand {k} the shape {shape:?} (try --size {n})"
                ))
                .into());
            }
            gen::rmat::<T>(s, 16, seed)
        }
        (d, None) => gen::uniform::<T>(shape, d.unwrap_or(0.01), seed),
    };
    t.map_err(input_err)
}

/// The job: the einsum (extents from the flags and the input files' shapes; see
/// [`extents`]), its sparse operands and its dense ones.
pub(super) fn job_of<T: Scalar>(expr: &str, args: &Args) -> anyhow::Result<SparseJob<T>> {
    let probe = super::einsum_from_args(expr, &super::ExtentArgs::default())?;
    let set = sparse_set(args, probe.num_inputs())?;
    let files = input_files(args);
    let (ext, mut read, npy) = extents::<T>(args, &probe, &files)?;
    let einsum = super::einsum_from_args(expr, &ext)?;
    let mut sparse = Vec::with_capacity(set.len());
    for &k in &set {
        let op = &einsum.inputs()[k];
        let shape: Vec<usize> = op.indices.iter().map(|&c| einsum.extent(c)).collect();
        sparse.push(sparse_operand(args, k, &shape, read[k].take())?);
    }
    // The dense files: shape and dtype checked against the operand, then read whole.
    let mut dense = vec![DenseOperand::Seeded(args.seed); einsum.num_inputs()];
    for (k, p) in npy.iter().enumerate() {
        let Some(p) = p else { continue };
        dense[k] = DenseOperand::Given(read_whole::<T>(p, &einsum, k)?);
    }
    let scheme = args.spmv_scheme.into();
    SparseJob::new(einsum, &set, sparse, |k| dense[k].clone(), scheme).map_err(input_err)
}

/// A sparse input file and the tensor read from it (with the file's own shape).
type ReadFile<T> = (PathBuf, SparseTensor<T>);

/// The extents of the run: a sparse file's shape gives the extents of its operand's indices
/// that no `--sizes` entry names, then the dense files' headers (so a dense file that
/// disagrees is the one named); the other extents come from the flags (default 10, as for
/// `run`). `--rmat S` without extent flags makes every extent 2^S. Returns the extents, the
/// sparse files read, and the dense files per operand.
#[allow(clippy::type_complexity)] // The three results of one pass over the files.
fn extents<T: Scalar>(
    args: &Args,
    probe: &deinsum_expr::ParsedEinsum,
    files: &[PathBuf],
) -> anyhow::Result<(
    super::ExtentArgs,
    Vec<Option<ReadFile<T>>>,
    Vec<Option<PathBuf>>,
)> {
    let x = &args.extents;
    let no_flags = x.sizes.is_none() && x.size.is_none() && x.shapes.is_none();
    let mut ext = x.clone();
    let mut read: Vec<Option<ReadFile<T>>> = (0..probe.num_inputs()).map(|_| None).collect();
    let named = |c: Index| {
        x.sizes.as_deref().is_some_and(|s| {
            s.split(',')
                .any(|kv| kv.trim().starts_with(&format!("{c}=")))
        })
    };
    let mut sizes: Vec<String> = x.sizes.iter().cloned().collect();
    let mut npy: Vec<Option<PathBuf>> = vec![None; probe.num_inputs()];
    let sparse_first = files
        .iter()
        .enumerate()
        .filter(|(_, p)| io::is_sparse_file(p))
        .chain(
            files
                .iter()
                .enumerate()
                .filter(|(_, p)| !io::is_sparse_file(p)),
        );
    for (k, p) in sparse_first {
        let idx: Vec<Index> = probe.inputs()[k].indices.clone();
        let shape = if io::is_sparse_file(p) {
            let t = io::read::<T>(p, None).map_err(input_err)?;
            let shape = t.shape().to_vec();
            read[k] = Some((p.clone(), t));
            shape
        } else {
            // A dense operand's .npy: its header's shape (checked against the einsum's
            // extents later, before anything is read).
            npy[k] = Some(p.clone());
            super::inputs::header_of(p)?.shape
        };
        if idx.len() != shape.len() || probe.inputs()[k].dims.len() != idx.len() {
            return Err(InputError(format!(
                "{} has {} modes but operand {k} has {} indices",
                p.display(),
                shape.len(),
                probe.inputs()[k].dims.len()
            ))
            .into());
        }
        for (c, n) in idx.iter().zip(&shape) {
            let given = format!("{c}=");
            let listed = sizes
                .iter()
                .any(|s| s.split(',').any(|kv| kv.starts_with(&given)));
            if !named(*c) && !listed {
                sizes.push(format!("{c}={n}"));
            }
        }
    }
    let rmat_n = |s: u32| 1usize.checked_shl(s).unwrap_or(0).to_string();
    if !files.is_empty() {
        ext.sizes = Some(sizes.join(","));
        if ext.size.is_none() && ext.shapes.is_none() {
            ext.size = Some(args.rmat.map_or(super::DEFAULT_SIZE.to_string(), rmat_n));
        }
    } else if let (Some(s), true) = (args.rmat, no_flags) {
        ext.size = Some(rmat_n(s));
    }
    Ok((ext, read, npy))
}

/// Dense operand `k`'s `.npy` file, shape and dtype checked against the operand (an error
/// names the file, the shape expected and the one found), then read whole (converted to `T`,
/// as numpy's astype).
fn read_whole<T: Scalar>(
    p: &std::path::Path,
    einsum: &deinsum_expr::ParsedEinsum,
    k: usize,
) -> anyhow::Result<Vec<T>> {
    let op = &einsum.inputs()[k];
    deinsum_exec::npy::check_operand_file::<T>(p, op, einsum.extents())
        .map_err(|e| InputError(e.to_string()))?;
    let shape: Vec<usize> = op.indices.iter().map(|&c| einsum.extent(c)).collect();
    let full = deinsum_plan::Block::full(&shape);
    deinsum_exec::npy::read_operand_block::<T>(p, op, einsum.extents(), &full)
        .map_err(|e| InputError(e.to_string()).into())
}
